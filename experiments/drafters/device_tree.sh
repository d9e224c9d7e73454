#!/usr/bin/env bash
# Prepares this checkout for pipeline.sh's device calls, and puts it back after. Run from the project root.
#   bash experiments/drafters/device_tree.sh stage    # the packaged GGUF in two parts (.cache/gpu/a/part_aa, b/part_ab)
#                                                     # and the data files pipeline.sh reads (.cache/gpu/b/data/)
#   bash experiments/drafters/device_tree.sh strip    # move what no stage reads out of the checkout (to $STASH)
#   bash experiments/drafters/device_tree.sh restore  # move it back (keeps a pipeline.sh edited meanwhile)
# Why: a device call carries at most 64 MiB (the tree, counted in 4 KiB blocks, plus `carry`), and the GGUF is 98 MB.
# Stripped, the tree is ~6 MB (the package without its checkpoints' weights, tests, pipeline.sh and prompts/), so
# the GGUF travels in two calls of ~49 MB each, not three. The device keeps ignored paths between calls while it
# stays warm (idle_release_s: 30), so make each call within 30 s of the last. The calls (run's `carry` in brackets):
#   1. [.whl, .cache/gpu/a]  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#                              --target /tmp/site .whl/*.whl     (part one; about 3 min to start the machine)
#   2. [.whl, .cache/gpu/b]  bash experiments/drafters/pipeline.sh arena-data       (joins the parts, ~520 s of shards)
#   3. [.whl]                bash experiments/drafters/pipeline.sh arena-data       (the rest of the shards)
#   4. [.whl]                BASE_HEADS= bash experiments/drafters/pipeline.sh arena  (trains; AL of the new head)
# then `restore`, and unpack $OUT's <name>.tgz.part_* (cat, tar xz). About 1300-1400 s of device time in all.
# The wide run (pipeline.sh wide-data / wide: set 4 plus the two magpie-more sets, ~120 shards) takes the same calls
# with those stage names. On an H100 (thirty-first session) the first data call made 77 of the 122 shards in 528 s and
# a second with DEADLINE_S=370 the other 45 in 325 s; then `BASE_HEADS= TRAIN_BUDGET_S=500 ... wide` (246 s of
# training and the AL sweep): 1360 s of device time in all, the machine's start included.
# With the GPU suite in the same session (about 450 s), the two overlap (planned 2026-12-05, not yet run): the shard
# generation, a 135M model, runs in the background beside the suite's processes, so the pair costs ~1150 s, not ~1850:
#   strip; 1. [.whl, .cache/gpu/a]  the pip line above              (part one)
#          2. [.whl, .cache/gpu/b]  bash experiments/drafters/device_tree.sh bg-data   (returns after ~45 s)
#   restore (within 30 s); 3. [.whl]  the suite, as experiments/gpu/suite.sh says    (the shards go on meanwhile)
#          4. [.whl]  bash experiments/drafters/device_tree.sh wait-data && BASE_HEADS= bash experiments/drafters/pipeline.sh arena
# bg-data starts `pipeline.sh arena-data` in a session of its own (setsid), which the device lets run on after the
# call returns, until the machine goes back; wait-data waits for it to end. Its log is .cache/gpu/bg-data.log.
# Tried on 2026-12-05 (twenty-eighth session) on an H100: bg-data ran, but beside it the suite's 'every' process
# (331 s alone) was cut at its 540 s limit (the card's memory in use peaked at 78849 of 81559 MiB), so bg-data was
# stopped and 'every' ran again alone (experiments/gpu/suite-2026-12-05-214c926.txt). On an H100 do not overlap: run
# the suite's calls first, and the arena run's in a session of its own (or on an H200, untried).
# Alone on an H100 (run on 2026-12-05, twenty-ninth session): call 2 made 55 of 65 shards in 533 s, call 3 the other
# 10 in 120 s, call 4 (TRAIN_BUDGET_S=500, else the budget, not the recipe, sets the steps) trained 6000 steps in
# 393 s and its AL sweep still fit the deadline; 1369 s of device time in all, the machine's start included.
# With DATA_DTYPE=bfloat16 (thirty-ninth session: the set written on the decode engine's path, pipeline.sh passes it
# to the data and the training calls alike) one H100 made all 122 shards of wide-data in 233 s, one call: the pip
# call, that one, then the training call fit in ~750 s of device time with the machine's start.
# The GPU suite and a bfloat16 head's run in one session on an H100 (planned in the thirty-ninth session, not yet run;
# strip keeps experiments/gpu, so the suite runs from the stripped tree):
#   1. [.whl, .cache/gpu/a]  the pip line; export PYTHONPATH=/tmp/site:$PWD; SUITE_TIMEOUT=540 bash experiments/gpu/suite.sh "$OUT"
#   2. [.whl, .cache/gpu/b]  the same with SUITE_PARTS=big, then DATA_DTYPE=bfloat16 DEADLINE_S=300 bash experiments/drafters/pipeline.sh wide-data
#   3. [.whl]                DATA_DTYPE=bfloat16 BASE_HEADS= ... bash experiments/drafters/pipeline.sh <mlp|wide|...>
# about 210 + 400 + 400 + 460 s. Run so in the fortieth session (2026-12-06, one H100): calls of 416 s (suite), 384 s
# (big 140 s, then the set) and 449 s (`MLP_WIDTH=3072 MLP_VOCAB=8192 TRAIN_BUDGET_S=330 DEADLINE_S=555 ... mlp`: 6000
# steps in 321 s and the sweep); 1544 s held with the machine's start.
# Planned in the fortieth session, not run (the forty-first session's `twice` run, below, found a second doubling of
# the prompts a wash, so a set doubled by more responses to the same prompts is unlikely to pay): the wider head on a set twice as large from the same prompts
# (SAMPLES=4; smoke-tested with SMOKE=1 on the CPU), after the pip call:
#   2. [.whl, .cache/gpu/b]  DATA_DTYPE=bfloat16 SAMPLES=4 DEADLINE_S=570 bash experiments/drafters/pipeline.sh wide-data
#   3. [.whl]                DATA_DTYPE=bfloat16 SAMPLES=4 BASE_HEADS= MLP_WIDTH=3072 MLP_VOCAB=8192 TRAIN_BUDGET_S=330 \
#                              DEADLINE_S=555 bash experiments/drafters/pipeline.sh mlp
# (and with MLP_WIDTH=1536 for the shipped width on that set, a fourth call, to separate the two effects).
# Run instead in the forty-first session (2026-12-06, one H100; experiments/drafters/README.md, "Twice the target's own
# requests again"): after the pip call, [.whl, .cache/gpu/b] `pipeline.sh magpie-more` (MAGPIE_SEEDS="4: 5:--magpie-openers
# 6: 7:--magpie-openers" MAGPIE_DTYPE=bfloat16 MAGPIE_MORE_S=45) then `DATA_DTYPE=bfloat16 pipeline.sh twice-data` in one
# call (563 s), then [.whl] `DATA_DTYPE=bfloat16 BASE_HEADS= TRAIN_BUDGET_S=340 DEADLINE_S=560 ... twice` (460 s).
# To stop a bg-data early on the device:
# pkill -f '[p]ipeline.sh arena-dat' (a plain pattern also matches the calling shell's own command line and kills it).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
STASH=${STASH:-/tmp/specbench-device-stash}
gguf=${SPECBENCH_CACHE:-$HOME/.cache/specbench}/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
# BG_STAGE: the data stage bg-data runs (arena-data, the default, or wide-data / evals-data)
case "${1:?usage: device_tree.sh stage|strip|restore|bg-data|wait-data}" in
  stage)
    [ -f "$gguf" ] || { echo "no $gguf: run python -m specbench once (it fetches the packaged model)"; exit 1; }
    mkdir -p .cache/gpu/a .cache/gpu/b/data
    split -b 49200000 "$gguf" .cache/gpu/part_
    mv .cache/gpu/part_aa .cache/gpu/a/ && mv .cache/gpu/part_ab .cache/gpu/b/
    data=${SPECBENCH_CACHE:-$HOME/.cache/specbench}/data
    cp "$data/mt_bench_question.jsonl" "$data/HumanEval.jsonl.gz" ../shared/data/spec_bench/question.jsonl .cache/gpu/b/data/
    cat .cache/gpu/?/part_a? | md5sum
    du -sh .cache/gpu/a .cache/gpu/b ;;
  strip)
    [ ! -e "$STASH" ] || { echo "$STASH exists: restore first"; exit 1; }
    mkdir -p "$STASH/checkpoints"
    for d in specbench/checkpoints/*/; do
      n=$(basename "$d")
      if [ -f "$d/model.safetensors" ]; then mkdir -p "$STASH/checkpoints/$n" && mv "$d/model.safetensors" "$STASH/checkpoints/$n/"; fi
    done
    mv experiments "$STASH/experiments"
    mkdir -p experiments/drafters
    cp "$STASH/experiments/drafters/pipeline.sh" "$STASH/experiments/drafters/device_tree.sh" \
      "$STASH/experiments/drafters/train_speed.sh" "$STASH/experiments/drafters/profile_train.py" experiments/drafters/
    cp -r "$STASH/experiments/drafters/prompts" experiments/drafters/
    cp -r "$STASH/experiments/gpu" experiments/  # 2.2 MB: the GPU suite can run from the stripped tree (bg-data beside it)
    du -sh --exclude=.git --exclude=.venv --exclude=.cache . ;;
  restore)
    [ -d "$STASH" ] || { echo "nothing stashed at $STASH"; exit 1; }
    for d in "$STASH"/checkpoints/*/; do mv "$d/model.safetensors" "specbench/checkpoints/$(basename "$d")/"; done
    cp experiments/drafters/pipeline.sh "$STASH/experiments/drafters/pipeline.sh"
    rm -rf experiments && mv "$STASH/experiments" experiments && rm -rf "$STASH"
    git status --short | head ;;
  bg-data)  # on the device: every shard in one background process (DATA_BUDGET_S, default 900 s) of BG_STAGE's set
    log=.cache/gpu/bg-data.log
    env -u OUT DATA_BUDGET_S=${DATA_BUDGET_S:-900} setsid nohup bash experiments/drafters/pipeline.sh "${BG_STAGE:-arena-data}" \
      > "$log" 2>&1 < /dev/null &
    sleep "${BG_SHOW_S:-45}"; cat "$log" ;;
  wait-data)  # on the device: until bg-data's process has ended (its last lines, then its exit)
    while pgrep -f "pipeline.sh [a-z]*-data" > /dev/null; do sleep 5; done
    tail -5 .cache/gpu/bg-data.log
    grep -q "^distillation set" .cache/gpu/bg-data.log ;;
  *) echo "usage: device_tree.sh stage|strip|restore|bg-data|wait-data"; exit 1 ;;
esac
