#!/usr/bin/env bash
# After the warm-up change (the product forms timed for 1..8 rows before the timed run), at the commit named in
# experiments/cpu/README.md:   bash experiments/cpu/amd-run4/run2.sh
set -u
d=experiments/cpu/amd-run4
OMP_NUM_THREADS=2 python experiments/cpu/bench_half.py > $d/bench_half.txt 2>&1
for h in true false; do
  OMP_NUM_THREADS=2 python experiments/cpu/time_draft.py /tmp/amd4-tdw-$h strategy.cpu_half_weights=$h > $d/time_draft-warm-half-$h.txt 2>&1
done
for i in 1 2; do
  python -m specbench logger=none hydra.run.dir=/tmp/amd4-final-$i > $d/default-final-run$i.txt 2>&1
done
