#!/usr/bin/env bash
# twenty-eighth session: main's default (eagle_auto, the tree here) at T=1, three runs, one at a time
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/amd-run13
for i in 1 2 3; do
  .venv/bin/python -m specbench logger=none sampling.temperature=1 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" \
    > $out/auto-28-t1-$i.txt
  echo "T=1 run $i: $(grep -E '^speedup \(|speed model' $out/auto-28-t1-$i.txt | tr '\n' ' ')"
done
