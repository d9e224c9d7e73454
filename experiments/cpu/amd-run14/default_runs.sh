#!/usr/bin/env bash
# forty-fifth session (2026-12-07, AMD EPYC, main with the CPU's row product): the README's default job run N times,
# one at a time with nothing else running, each with its own target-only baseline in turns; the CLI's output,
# progress bars filtered. The AMD EPYC's README row predated the row product (39f10a8).
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/amd-run14
git log --oneline -1 > $out/commit.txt
for i in $(seq "${N:-6}"); do
  .venv/bin/python -m specbench logger=none 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/default-$i.txt
  echo "run $i: $(grep -E '^speedup \(|speed model|identical' $out/default-$i.txt | tr '\n' ' ')"
done
