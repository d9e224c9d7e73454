#!/usr/bin/env bash
# thirty-sixth session (2026-12-06): the default job with a tree of 8 nodes (3 branches a node: a 9-row verify), main
# (the row product takes 9 rows as 8 + 1) against R16 (a checkout with experiments/gpu/pending/cpu-rows-docstring,
# -avx2 and -16.patch applied: 16 rows a pass), in turns, one process at a time, nothing else running.
#   R16=/tmp/r16 bash experiments/cpu/intel-noamx-run2/nodes8.sh
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2
here=$PWD
run() {  # name, directory to run in
  (cd "$2" && "$here/.venv/bin/python" -m specbench logger=none strategy.num_nodes=8 strategy.top_k=3 2>&1) | tr '\r' '\n' \
    | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/$1.txt
  echo "$1: $(grep -E '^speedup \(|speed model|identical' $out/$1.txt | tr '\n' ' ')"
}
run nodes8-rows16 "$R16"
run nodes8-main "$here"
