#!/usr/bin/env bash
# The whole GPU suite (pytest -m gpu) in one device command, as six pytest processes on the one H200, five at a time
# ('big', whose 32B test holds 64 GB, runs after 'front1': beside the 8B tests it ran them out of memory).
# Serially it takes ~565 s (part 1 ~442 s + part 2 ~122 s on 2026-12-02), too close to the 600 s limit of one command.
# On the nvidia-h200 device machine (carry .whl):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/gpu/suite.sh "$OUT"
# SUITE_PARTS="kernels front1 batch64 rest" runs only those processes (a partial suite: its log says so).
# Writes suite.txt into the output folder (every process's log, with its command, exit status and seconds); the
# per-process logs go to a temporary folder, since the device tool brings back only a few files from $OUT (on
# 2026-12-04 a suite.txt beside seven other files was left behind).
# The exit status is 0 only if every process exited 0 (pytest's 5, "nothing collected", counts as a failure).
set -u
out=${1:-/tmp/suite}; mkdir -p "$out"
logs=$(mktemp -d)
limit=${SUITE_TIMEOUT:-540}  # each process (every: 331 s at 6c3ef88, 394 s at eaca4f4, before eagle_adaptive.yaml
# added its 4 jobs to it); front1 then big share one slot
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
big="32b or vlm or continuous or two_processes"
split="invariant or dependent or self_draft or seed_pr or launchers or every_strategy or batch_64"
declare -A cmd=(
  [kernels]="-m gpu tests/kernels"
  [front1]="-m gpu tests --ignore=tests/kernels -k 'not ($big) and (invariant or dependent or self_draft or seed_pr or launchers)'"
  [every]="-m gpu tests --ignore=tests/kernels -k 'not ($big) and every_strategy'"
  [batch64]="-m gpu tests --ignore=tests/kernels -k 'not ($big) and batch_64'"
  [rest]="-m gpu tests --ignore=tests/kernels -k 'not ($big) and not ($split)'"
  [big]="-m gpu tests -k '$big'"
)
names=${SUITE_PARTS:-kernels front1 every batch64 rest big}  # SUITE_PARTS: a subset, when device time is short
# On a card of under 100 GiB (the H100's 80 GB) the five processes beside 'big' (64 GB) do not fit: there 'batch64'
# and 'rest' wait for 'front1' (two 8B processes at a time), and 'big' needs a call of its own (SUITE_PARTS=big)
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
small=$(( ${mib:-0} < 100000 ))
if [ "$small" = 1 ] && [[ " $names " == *" big "* ]] && [ "$names" != big ]; then
  names=$(echo " $names " | sed 's/ big / /; s/^ //; s/ $//')
  SUITE_PARTS=$names  # the log says PARTIAL
  echo "a ${mib} MiB card: 'big' left out here; run it in a call of its own (SUITE_PARTS=big)"
fi
( peak=0; while sleep 2; do  # the card's peak memory in use, for the log
    m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    [ "${m:-0}" -gt "$peak" ] && peak=$m && echo "$peak" > "$logs/peak"; done ) &
sampler=$!
one() {
  local start=$SECONDS
  eval timeout "$limit" python3 -m pytest -q -rs -p no:cacheprovider ${cmd[$1]} > "$logs/$1.log" 2>&1
  echo "rc $? $((SECONDS - start))s" >> "$logs/$1.log"
}
has() { [[ " $names " == *" $1 "* ]]; }
for n in $names; do
  case $n in
    big) has front1 || one big & ;;
    front1) { one front1; ! has big || one big; if [ "$small" = 1 ]; then for m in batch64 rest; do
                ! has $m || one $m; done; fi; } & ;;
    batch64|rest) [ "$small" = 1 ] && has front1 || one "$n" & ;;
    *) one "$n" & ;;
  esac
done
wait $(jobs -p | grep -vx "$sampler")
kill "$sampler" 2>/dev/null
{
  echo "# GPU suite at ${SUITE_COMMIT:-$(git rev-parse --short HEAD)}, $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo "# code: $(bash experiments/gpu/code_sum.sh) (experiments/gpu/code_sum.sh <commit> gives a commit's)"
  [ -z "${SUITE_PARTS:-}" ] || echo "# PARTIAL: only the processes $names"
  echo "# peak GPU memory in use: $(cat "$logs/peak" 2>/dev/null || echo '?') MiB of ${mib} MiB"
  python3 -c "import torch, triton, transformers; print('# torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  for n in $names; do echo "# process $n:"; echo "#   pytest ${cmd[$n]}"; cat "$logs/$n.log"; done
} > "$out/suite.txt"
cat "$out/suite.txt"
! grep -q "^rc [^0]" "$logs"/*.log
