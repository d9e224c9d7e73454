#!/usr/bin/env bash
# Issue 12's CPU table: all 80 MT-Bench first turns, SmolLM2-135M with its shipped EAGLE head (the embedded default),
# batch 1, T=0, 64 new tokens: the chain at k=3 against EAGLE-2 dynamic trees of 8 and 16 verified nodes (k=4,
# top_k=4) and the default static tree (k=3, 9 nodes). Each run decodes target-only beside it (baseline=true), so
# each speedup is measured side by side in one process.
#   bash experiments/trees/mtbench80.sh experiments/trees/mtbench80
set -u
out=${1:-/tmp/mtbench80}; mkdir -p "$out"
export WANDB_MODE=disabled
common="logger=none dataset.num_prompts=null"
run() { name=$1; shift; python -m specbench $common "$@" hydra.run.dir="/tmp/mtbench80-runs/$name" > "$out/$name.txt" 2>&1; }
run chain-k3 strategy.k=3
run dynamic-8 strategy.k=4 strategy.tree=dynamic strategy.top_k=4 strategy.num_nodes=8
run dynamic-16 strategy.k=4 strategy.tree=dynamic strategy.top_k=4 strategy.num_nodes=16
run static-k3 strategy.k=3 strategy.tree=static
grep -H -E "acceptance length|per-position|nodes verified|AL / verified|TPOT ms|speedup \(|identical" "$out"/*.txt
