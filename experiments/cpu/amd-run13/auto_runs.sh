#!/usr/bin/env bash
# twenty-eighth session: main's default (eagle_auto, the four pending patches landed at 39f10a8) run N times, one at a
# time with nothing else running, each its own target-only baseline in turns; the CLI's output, progress bars filtered
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/amd-run13
for i in $(seq "${N:-8}"); do
  .venv/bin/python -m specbench logger=none 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/auto-28-$i.txt
  echo "run $i: $(grep -E '^speedup \(|speed model|identical' $out/auto-28-$i.txt | tr '\n' ' ')"
done
