#!/usr/bin/env bash
# in turns, one at a time: the default and its alternatives on this CPU
cd /work/main
for round in 1 2; do
  for s in eagle_adaptive eagle_tree eagle; do
    .venv/bin/python -m specbench logger=none strategy=$s > /tmp/amd/ab-$s-$round.txt 2>&1
    echo "$s $round: $(grep -E '^speedup \(|speed model' /tmp/amd/ab-$s-$round.txt | tr '\n' ' ')"
  done
done
