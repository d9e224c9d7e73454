#!/usr/bin/env bash
# bf16_head.py in turns on eagle_tree (this machine's faster default job), three rounds, one job at a time, from the
# project root: bash experiments/cpu/amd-run13/bf16_head_ab.sh <out dir>
set -euo pipefail
out=${1:?out dir}; mkdir -p "$out"
for round in 1 2 3; do
  for bf in 1 0; do
    f=$out/bf16-head-$bf-$round.txt
    BF16=$bf python experiments/cpu/amd-run13/bf16_head.py logger=none strategy=eagle_tree output_dir=$out/run-$bf-$round \
      2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > "$f"
    echo "BF16=$bf $round: $(grep -E '^speedup \(|speed model|identical' "$f" | cut -c1-200 | tr '\n' ' ')"
  done
done
