#!/usr/bin/env bash
# Issue 14's third run (2026-12-02): Spec-Bench at k=1..5 for every strategy, and draft_model on all three sets, with
# the CPU default of that day (engine.dtype=auto: bfloat16, bit-invariant; the eagle head shipped that day). Run it
# ALONE on the 2-core machine. draft_model's draft is the shipped PARD drafter run autoregressively (the same 2-layer
# LM that `parallel` runs with mask tokens), made first by experiments/frontier/pard_ar_draft.py:
#   python experiments/frontier/pard_ar_draft.py .cache/pard-ar
#   bash experiments/frontier/run3.sh
#   (the committed sweeps are packed: tar xJf experiments/frontier/sweeps.tar.xz -C experiments/frontier)
#   python -m specbench.report experiments/frontier/sweeps/*-run3 --out experiments/frontier/run3
# Jobs in order of need (a cut run keeps every finished job: results.json is written last). On 2026-12-02 the last
# sweep (the eagle tree on Spec-Bench) was stopped for time before its first job.
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python}
OUT=experiments/frontier/sweeps
DRAFT=${DRAFT:-$PWD/.cache/pard-ar}
common="logger=none max_new_tokens=48 engine.batch_size=1 sampling.temperature=0,1"
ks="strategy.k=1,2,3,4,5"
spec="dataset=spec-bench dataset.per_category=1 dataset.num_prompts=null"
sweep() {  # name, overrides...
  local name=$1; shift
  echo "== $name $(date -u +%H:%M:%S)"
  $PY -m specbench -m $common "$@" hydra.sweep.dir="$OUT/$name-run3" hydra.sweep.subdir='${hydra.job.num}' \
    > "$OUT-$name-run3.log" 2>&1 || echo "FAILED $name (see $OUT-$name-run3.log)"
}
sweep spec-bench $spec strategy=suffix,parallel,ngram,eagle $ks
sweep spec-bench-draft_model $spec strategy=draft_model draft.path=$DRAFT $ks
for set in mt-bench humaneval; do
  sweep $set-draft_model dataset=$set dataset.num_prompts=8 strategy=draft_model draft.path=$DRAFT $ks
done
sweep spec-bench-eagle-tree $spec strategy=eagle strategy.tree=dynamic strategy.top_k=4 strategy.num_nodes=8 \
  strategy.k=2,4,5
grep -h "speedup (" "$OUT"-*-run3.log | wc -l
