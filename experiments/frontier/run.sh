#!/usr/bin/env bash
# Issue 14's comparison on the 2-core CPU, through the CLI: the packaged smollm2-135m target, k=$KS, T=0 and T=1, batch 1,
# each job with its in-job target-only baseline (speedup measured side by side). Run it ALONE on the machine.
#   bash experiments/frontier/run.sh                                         # first run (k=3, eagle tree depth 4)
#   KS=1,2,4,5 TREE_KS=2,5 SETS=mt-bench,humaneval TAG=-k1245 bash experiments/frontier/run.sh   # second run
#   (the committed sweeps are packed: tar xJf experiments/frontier/sweeps.tar.xz -C experiments/frontier)
#   then: python -m specbench.report experiments/frontier/sweeps/* --out experiments/frontier
# Strategies: suffix (chain), parallel (the shipped 2-layer PARD checkpoint), ngram, eagle (chain) and eagle with
# EAGLE-2's dynamic tree (depth 4, top_k 4, 8 nodes). draft_model is not in it: smollm2-135m ships no smaller draft
# of its tokenizer (draft=auto is the target itself; the distilled 4-layer draft is not shipped).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python}
OUT=experiments/frontier/sweeps
KS=${KS:-3}                  # k values, comma-separated (the first run: 3; the second: KS=1,2,4,5 SETS=mt-bench,humaneval)
TREE_KS=${TREE_KS:-4}        # depths of the eagle dynamic tree (the first run: 4; the second: 2,5)
SETS=${SETS:-mt-bench,humaneval,spec-bench}
TAG=${TAG:-}                 # suffix of the sweep directories (the second run: -k1245)
common="logger=none max_new_tokens=48 engine.batch_size=1"
declare -A ARGS=([mt-bench]="dataset.num_prompts=8" [humaneval]="dataset.num_prompts=8"
                 [spec-bench]="dataset.per_category=1 dataset.num_prompts=null")
for name in ${SETS//,/ }; do
  $PY -m specbench -m $common dataset=$name ${ARGS[$name]} strategy=suffix,parallel,ngram,eagle strategy.k=$KS \
    sampling.temperature=0,1 hydra.sweep.dir="$OUT/$name$TAG" hydra.sweep.subdir='${hydra.job.num}' > "$OUT-$name$TAG.log" 2>&1
  $PY -m specbench -m $common dataset=$name ${ARGS[$name]} strategy=eagle strategy.tree=dynamic strategy.k=$TREE_KS \
    strategy.top_k=4 strategy.num_nodes=8 sampling.temperature=0,1 hydra.sweep.dir="$OUT/$name-eagle-tree$TAG" \
    hydra.sweep.subdir='${hydra.job.num}' > "$OUT-$name-eagle-tree$TAG.log" 2>&1
done
grep -h "speedup (" "$OUT"-*.log
