#!/usr/bin/env bash
# All 80 MT-Bench prompts, T=0, the chain then the tree, one job at a time, from the project root:
#   bash experiments/cpu/amd-run13/all80.sh <out dir>    (ORDER="eagle_tree eagle_adaptive": the other order)
set -euo pipefail
out=${1:?out dir}; mkdir -p "$out"
for s in ${ORDER:-eagle_adaptive eagle_tree}; do
  f=$out/all80-$s.txt
  python -m specbench logger=none strategy=$s dataset.num_prompts=null output_dir=$out/all80-$s \
    2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > "$f"
  echo "$s: $(grep -E '^speedup \(|speed model|identical' "$f" | cut -c1-200 | tr '\n' ' ')"
done
