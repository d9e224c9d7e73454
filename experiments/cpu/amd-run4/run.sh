#!/usr/bin/env bash
# The runs behind experiments/cpu/README.md's "float16 copies of the head's weights" section (AMD EPYC, 2 cores, AVX2):
#   bash experiments/cpu/amd-run4/run.sh
# Default job with strategy.cpu_half_weights=true and false, alternating, twice; where a draft pass goes, both ways;
# the default job on all 80 MT-Bench prompts.
set -u
d=experiments/cpu/amd-run4
for i in 1 2; do
  for h in true false; do
    python -m specbench logger=none strategy.cpu_half_weights=$h hydra.run.dir=/tmp/amd4-$h-$i > $d/default-half-$h-run$i.txt 2>&1
  done
done
for h in true false; do
  OMP_NUM_THREADS=2 python experiments/cpu/time_draft.py /tmp/amd4-td-$h strategy.cpu_half_weights=$h > $d/time_draft-half-$h.txt 2>&1
done
python -m specbench logger=none dataset.num_prompts=null hydra.run.dir=/tmp/amd4-all80 > $d/default-all-80.txt 2>&1
