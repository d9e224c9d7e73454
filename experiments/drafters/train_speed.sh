#!/usr/bin/env bash
# Training steps a second through `python -m specbench.train`, the package before and after a change, in turns.
# Run from the project root on a GPU machine (the pip line of ../shared/device/fetch-wheels.sh first, into /tmp/site):
#   git archive <old commit> specbench conf ':!specbench/checkpoints' | tar -x -C .cache/gpu/old    # here, then
#   [.whl, .cache/gpu/old]  ROUNDS=2 STEPS=300 bash experiments/drafters/train_speed.sh
#   (on the CPU, a smoke run: DEV=cpu OLD=<dir> STEPS=6 TB=4 PROMPTS=16 DATA_BS=8 VAL=2 ROUNDS=1, in the venv;
#   ROUNDS=0 PROFILE=1 profiles a step and times nothing; PROFILE_ARGS adds overrides to the profiled run and
#   PROFILE_TAG to its folder's name, e.g. PROFILE_ARGS=train.precision=bfloat16 PROFILE_TAG=-bf16)
# The recipe is the 2-layer head's (pipeline.sh deep: unroll 3, soft labels, draft vocabulary 8192, batch 32, the
# target's LM head rows) on smollm2-135m-random, the packaged target's architecture with random weights, so the
# GGUF need not travel: the same shapes and the same work a step. Its set: the committed python_stdlib prompts, 128
# new tokens each in bfloat16 (a random target rarely stops early, so each response is 128 tokens; the real
# target's vary). Each round trains the old package, then the new with train.prefetch=false and =true, from the
# same cached set; each prints its steps a second (the trainer's own clock: metrics.jsonl's elapsed_s at the last
# step, training only) and its checkpoint's sha256.
set -euo pipefail
G=$PWD/.cache/gpu
RUN=${RUN:-$G/speed}
OLD=${OLD:-$G/old}
OUT=${OUT:-$RUN/out}
mkdir -p "$RUN" "$OUT"
DEV=${DEV:-cuda}
export PYTHONPATH=/tmp/site:$PWD
[ "$DEV" = cpu ] || [ -d /tmp/site/hydra ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 SPECBENCH_CACHE=$RUN/cache
COMMON="target=smollm2-135m-random device=$DEV logger=none seed=0 strategy=eagle strategy.unroll=3
  strategy.soft_labels=true strategy.draft_vocab=8192 strategy.num_layers=2 strategy.draft_lm_head=target
  train.batch_size=${TB:-32} train.lr=6e-4 train.warmup=100 train.steps=${STEPS:-300} train.ce_vocab=0
  train.ce_positions=0 train.val_sequences=${VAL:-64} train.save_every=100000 save_dtype=float16
  data.path=[$PWD/experiments/drafters/prompts/python_stdlib.jsonl.gz] data.num_prompts=${PROMPTS:-1500}
  data.max_prompt_tokens=512 data.max_new_tokens=128 data.batch_size=${DATA_BS:-384} data.dtype=bfloat16
  data.cache_dir=$RUN/distill"
[ "$DEV" = cuda ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
# the set, once (both packages read the same shards: the set's settings did not change)
python3 -m specbench.train $COMMON train.stop_after=1 output_dir=$RUN/data 2>&1 \
  | tr '\r' '\n' | grep -E "^distillation" | tail -2
one() {  # name, package root (run from there: `python -m` reads the working directory first), extra overrides
  local name=$1 root=$2; shift 2
  # ENTRY: what runs the trainer (train_fold.py for the bf16-fold side)
  (cd "$root" && PYTHONPATH=/tmp/site:$root python3 ${ENTRY:--m specbench.train} $COMMON output_dir=$RUN/$name "$@") \
    > "$RUN/$name.log" 2>&1
  # the trainer's own clock: elapsed_s at the last step it logged (training only; the held-out pass comes after)
  python3 - "$RUN/$name" "$name" <<'PY'
import hashlib, json, sys
from pathlib import Path
run, name = Path(sys.argv[1]), sys.argv[2]
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
row = [r for r in rows if "elapsed_s" in r][-1]
sha = hashlib.sha256((run / "checkpoint" / "model.safetensors").read_bytes()).hexdigest()[:16]
val = [r for r in rows if "val/loss" in r]
held = ", ".join(f"{k[4:]} {v:.3f}" for k, v in val[-1].items() if k.startswith("val/acc_")) if val else "none"
print(f"{name}: {row['step']} steps in {row['elapsed_s']:.1f} s = {row['step'] / row['elapsed_s']:.2f} steps/s; "
      f"checkpoint sha256 {sha}; held out: {held}")
PY
}
# SIDES picks the runs of each round, in order: old (the package in $OLD), new-noprefetch, new-prefetch (this one,
# train.prefetch=false / true), fp32, bf16 (this one, train.precision=float32 / bfloat16), bf16-fold (bf16 with the
# head's attention folded on every dtype: experiments/drafters/train_fold.py; since af5881e the same as bf16). The
# new-* sides and the profile run float32, as they did before train.precision's default became auto (bf16 for EAGLE
# heads on CUDA)
for r in $(seq "${ROUNDS:-2}"); do
  for side in ${SIDES:-old new-noprefetch new-prefetch}; do
    case $side in
      old) one "old-r$r" "$OLD" ;;
      new-noprefetch) one "$side-r$r" "$PWD" train.prefetch=false train.precision=float32 ;;
      new-prefetch) one "$side-r$r" "$PWD" train.prefetch=true train.precision=float32 ;;
      fp32) one "$side-r$r" "$PWD" train.precision=float32 ;;
      bf16) one "$side-r$r" "$PWD" train.precision=bfloat16 ;;
      bf16-fold) ENTRY=$PWD/experiments/drafters/train_fold.py one "$side-r$r" "$PWD" train.precision=bfloat16 ;;
      *) echo "SIDES: unknown side $side (allowed: old new-noprefetch new-prefetch fp32 bf16 bf16-fold)"; exit 2 ;;
    esac
  done
done | tee "$OUT/train_speed.txt"
# PROFILE=1: then where a step's time goes (experiments/drafters/profile_train.py: steps 10-14 of a 30-step run of
# the new package with the same settings) into $OUT/prof-train (summary.txt, ops.txt, trace.json.gz)
if [ "${PROFILE:-0}" = 1 ]; then
  PROFILE_OUT=$OUT/prof-train${PROFILE_TAG:-} python3 experiments/drafters/profile_train.py $COMMON train.steps=30 train.precision=float32 ${PROFILE_ARGS:-} \
    output_dir=$RUN/prof 2>&1 | tr '\r' '\n' | grep -v "^train eagle:" | tail -8
fi
