#!/usr/bin/env bash
# Issue 14's comparison on the 2-core CPU, through the CLI: the packaged smollm2-135m target, k=3, T=0 and T=1, batch 1,
# each job with its in-job target-only baseline (speedup measured side by side). Run it ALONE on the machine.
#   bash experiments/frontier/run.sh            # then: python -m specbench.report experiments/frontier/sweeps/* --out experiments/frontier
# Strategies: suffix (chain), parallel (the shipped 2-layer PARD checkpoint), ngram, eagle (chain) and eagle with
# EAGLE-2's dynamic tree (depth 4, top_k 4, 8 nodes). draft_model is not in it: smollm2-135m ships no smaller draft
# of its tokenizer (draft=auto is the target itself; the distilled 4-layer draft is not shipped).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python}
OUT=experiments/frontier/sweeps
common="logger=none max_new_tokens=48 engine.batch_size=1"
for set in "mt-bench dataset.num_prompts=8" "humaneval dataset.num_prompts=8" "spec-bench dataset.per_category=1 dataset.num_prompts=null"; do
  name=${set%% *}
  $PY -m specbench -m $common dataset=$set strategy=suffix,parallel,ngram,eagle strategy.k=3 sampling.temperature=0,1 \
    hydra.sweep.dir="$OUT/$name" hydra.sweep.subdir='${hydra.job.num}' > "$OUT-$name.log" 2>&1
  $PY -m specbench -m $common dataset=$set strategy=eagle strategy.tree=dynamic strategy.k=4 strategy.top_k=4 \
    strategy.num_nodes=8 sampling.temperature=0,1 hydra.sweep.dir="$OUT/$name-eagle-tree" hydra.sweep.subdir='${hydra.job.num}' \
    > "$OUT-$name-eagle-tree.log" 2>&1
done
grep -h "speedup (" "$OUT"-*.log
