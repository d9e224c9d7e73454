#!/usr/bin/env bash
# the CPU default (eagle_auto) with the shipped head and with the MLP-3072 head, in turns, one at a time
cd /work/main && . .venv/bin/activate
for r in 1 2 3; do
  for side in shipped wide; do
    ck=""; [ $side = wide ] && ck="strategy.checkpoint=/tmp/mlp/mlp3072-v8192/checkpoint"
    python -m specbench logger=none $ck hydra.run.dir=/tmp/wideturns/$side-$r > /tmp/wideturns/$side-$r.txt 2>&1
  done
done
