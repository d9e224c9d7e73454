#!/usr/bin/env bash
# Acceptance length and mean K (no speed): fixed k=1..5 against the adaptive schedules, smollm2-135m (the packaged
# preset), T=0, 20 prompts x 64 new tokens. Fixed k runs at engine.batch_size=20 (T=0 acceptance does not depend on
# the batch for a fixed k; 20x fewer forwards); the schedules at batch 1 (their batch rule needs every active row).
# PAIRS="ngram:humaneval" picks strategy:dataset pairs. Results: experiments/adaptive/runs/<name>/results.json; table: python experiments/adaptive/table.py
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python}
OUT=experiments/adaptive/runs
common="dataset.num_prompts=20 max_new_tokens=64 logger=none baseline=false"
job() {  # name, overrides...
  local name=$1; shift
  [ -f "$OUT/$name/results.json" ] && return 0
  echo "== $name: $*"
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} $PY -m specbench $common "$@" +output_dir="$OUT/$name" > "$OUT/$name.log" 2>&1 || echo "FAILED $name"
}
mkdir -p "$OUT"
for pair in ${PAIRS:-eagle:mt-bench ngram:humaneval ngram:mt-bench eagle:humaneval}; do
  s=${pair%%:*}; d=${pair#*:}
  job "$s-$d-heuristic" strategy=$s dataset=$d strategy.k=5 strategy.k_schedule=heuristic
  [ "$s" != ngram ] && job "$s-$d-confidence" strategy=$s dataset=$d strategy.k=5 strategy.k_schedule=confidence strategy.confidence_threshold=0.4
  for k in 1 2 3 4 5; do job "$s-$d-k$k" strategy=$s dataset=$d strategy.k=$k engine.batch_size=20; done
done
