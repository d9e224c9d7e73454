#!/usr/bin/env bash
# thirty-second session: main's default (eagle_auto, the wide head shipped at 5f4bea1) run N times on the AMD EPYC, one
# at a time with nothing else running on the CPU, each with its own target-only baseline in turns; the CLI's output,
# progress bars filtered. Run from a clone of main (python -m specbench imports the package from the working directory).
out=${OUT:-experiments/cpu/amd-run15}
for i in $(seq "${N:-8}"); do
  ${PY:-.venv/bin/python} -m specbench logger=none 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/auto-32-$i.txt
  echo "run $i: $(grep -E '^speedup \(|speed model|identical' $out/auto-32-$i.txt | tr '\n' ' ')"
done
