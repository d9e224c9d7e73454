#!/usr/bin/env bash
# twenty-eighth session, after auto_runs.sh: main's default (eagle_auto, the tree here) and main's default before
# (eagle_adaptive, the chain) in turns, one process at a time, to see whether auto_runs.sh's range is the machine's
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/amd-run13
for round in 1 2 3; do
  for s in eagle_adaptive eagle_auto; do
    .venv/bin/python -m specbench logger=none strategy=$s 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" \
      > $out/turns-28-$s-$round.txt
    echo "$s $round: $(grep -E '^speedup \(|speed model|identical' $out/turns-28-$s-$round.txt | tr '\n' ' ')"
  done
done
