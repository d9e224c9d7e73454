#!/usr/bin/env bash
# AMD EPYC (float32), one job at a time, nothing else running: the default (eagle_adaptive) and eagle_tree in turns,
# T=0 three rounds, T=1 two rounds
cd /work/main
for round in 3 4 5; do for T in 0 1; do
  [ "$T" = 1 ] && [ "$round" = 5 ] && continue
  for s in eagle_adaptive eagle_tree; do
    f=/tmp/amd/ab-$s-t$T-$round.txt
    .venv/bin/python -m specbench logger=none strategy=$s sampling.temperature=$T 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $f
    echo "$s T=$T $round: $(grep -E '^speedup \(|speed model|identical' $f | cut -c1-200 | tr '\n' ' ')"
  done
done; done
