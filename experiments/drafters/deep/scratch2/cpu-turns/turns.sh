#!/usr/bin/env bash
# the CPU default (eagle_auto) with the shipped head and with the 2-layer head of deep/scratch2 (its checkpoint from the
# device's output, unpacked to /tmp/deep), in turns, one at a time; the logs land beside this script
cd /work/main && . .venv/bin/activate
here=experiments/drafters/deep/scratch2/cpu-turns
for r in 1 2 3; do
  for side in shipped deep2; do
    ck=""; [ $side = deep2 ] && ck="strategy.checkpoint=/tmp/deep/deep2-target/checkpoint"
    python -m specbench logger=none $ck hydra.run.dir=/tmp/deepturns/$side-$r > $here/$side-$r.txt 2>&1
  done
done
