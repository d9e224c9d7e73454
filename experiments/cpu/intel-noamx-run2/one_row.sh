#!/usr/bin/env bash
# thirty-sixth session (2026-12-06): the default job with the row product taken at 1 row too (within ROWS_MARGIN, as
# from 2 rows on; ONE_ROW, a checkout of main with `rows > 1 and ` removed from _time_forms' ROWS_MARGIN line; not kept)
# against main (efb0459's code), in turns, two rounds, one process at a time, nothing else running. Both share this checkout's venv.
#   ONE_ROW=/tmp/r1 bash experiments/cpu/intel-noamx-run2/one_row.sh
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2
here=$PWD
run() {  # name, directory to run in
  (cd "$2" && "$here/.venv/bin/python" -m specbench logger=none 2>&1) | tr '\r' '\n' \
    | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/$1.txt
  echo "$1: $(grep -E '^speedup \(|speed model|identical|TPOT ms' $out/$1.txt | tr '\n' ' ')"
}
for round in 1 2; do
  run one-row-$round "$ONE_ROW"
  run main-$round "$here"
done
