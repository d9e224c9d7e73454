#!/usr/bin/env bash
# The default job in turns, T=0 and T=1, two rounds: main (old) against a checkout with the reduced-vocabulary pick
# (new; experiments/gpu/pending/0002-*.patch applied). Run from anywhere, one job at a time, nothing else running:
#   NEW=/path/to/checkout-with-0002 OLD=/path/to/main bash experiments/cpu/intel-run4/vocab_ab.sh <out dir>
set -euo pipefail
out=${1:?out dir}; mkdir -p "$out"; cd "$out"
py=${PYTHON:-python}
for round in 1 2; do
  for tree in new old; do
    [ "$tree" = new ] && P=$NEW || P=$OLD
    for T in 0 1; do
      PYTHONPATH=$P OMP_NUM_THREADS=2 $py -m specbench logger=none sampling.temperature=$T output_dir=$out/$tree-t$T-$round \
        2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > vocab-ab-$tree-t$T-$round.txt
      grep -E '^speedup \(' vocab-ab-$tree-t$T-$round.txt
    done
  done
done
