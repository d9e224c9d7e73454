#!/usr/bin/env bash
# thirty-sixth session (2026-12-06), at efb0459 (the row product with its prefetch): main before the row product
# (BEFORE, a clone at f47a3b4), the default after (eagle_auto, the tree here) and the chain after (eagle_adaptive),
# in turns, two rounds, one process at a time, nothing else running on the CPU.
#   git clone -q . /tmp/before && git -C /tmp/before checkout -q f47a3b4
#   BEFORE=/tmp/before bash experiments/cpu/intel-noamx-run2/turns2.sh
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2
here=$PWD
run() {  # name, directory to run in, strategy
  (cd "$2" && "$here/.venv/bin/python" -m specbench logger=none strategy=$3 2>&1) | tr '\r' '\n' \
    | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/$1.txt
  echo "$1: $(grep -E '^speedup \(|speed model|identical' $out/$1.txt | tr '\n' ' ')"
}
for round in 1 2; do
  run prefetch-before-$round "$BEFORE" eagle_auto
  run prefetch-tree-$round "$here" eagle_auto
  run prefetch-chain-$round "$here" eagle_adaptive
done
