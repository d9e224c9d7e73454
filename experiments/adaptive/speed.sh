#!/usr/bin/env bash
# Speed of adaptive K against fixed k (run it ALONE on the machine: wall-clock ratios need an idle CPU).
# smollm2-135m (packaged), T=0, batch 1, 20 prompts x 64 new tokens, each job with its in-job target-only baseline.
#   experiments/adaptive/speed.sh            # eagle on MT-Bench: fixed k=2,3,4, heuristic (k<=5), confidence 0.4 (k<=5)
#   experiments/adaptive/speed.sh ngram      # ngram on HumanEval: fixed k=3,4,5, heuristic (k<=5)
# ~2.5-3 min a job on 2 idle cores (strategy + baseline), 5 jobs ~15 min; 4 jobs for ngram.
# Then: python experiments/adaptive/table.py experiments/adaptive/speed   (or python -m specbench.report experiments/adaptive/speed)
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python}
OUT=experiments/adaptive/speed
common="dataset.num_prompts=${NUM_PROMPTS:-20} max_new_tokens=64 logger=none baseline=true engine.batch_size=1"
job() {  # name, overrides...
  local name=$1; shift
  [ -f "$OUT/$name/results.json" ] && return 0
  echo "== $name: $*"
  $PY -m specbench $common "$@" +output_dir="$OUT/$name" > "$OUT/$name.log" 2>&1 || echo "FAILED $name (see $OUT/$name.log)"
}
mkdir -p "$OUT"
case "${1:-eagle}" in
  eagle)
    for k in 2 3 4; do job "eagle-mt-bench-k$k" strategy=eagle dataset=mt-bench strategy.k=$k; done
    job eagle-mt-bench-heuristic strategy=eagle dataset=mt-bench strategy.k=5 strategy.k_schedule=heuristic
    job eagle-mt-bench-confidence strategy=eagle dataset=mt-bench strategy.k=5 strategy.k_schedule=confidence strategy.confidence_threshold=0.4
    ;;
  ngram)
    for k in 3 4 5; do job "ngram-humaneval-k$k" strategy=ngram dataset=humaneval strategy.k=$k; done
    job ngram-humaneval-heuristic strategy=ngram dataset=humaneval strategy.k=5 strategy.k_schedule=heuristic
    ;;
  *) echo "usage: $0 [eagle|ngram]"; exit 2 ;;
esac
$PY experiments/adaptive/table.py "$OUT"
