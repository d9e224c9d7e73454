#!/usr/bin/env bash
# The one difference the H100 sweep did not settle (paired.txt): MT-Bench's chain at T = 1, where the bfloat16 head
# read 0.066 under the float32 head of the same recipe and seed (interval -0.135 to +0.002). Both heads again on the
# CPU (fp32 decoding, 64 new tokens, k = 3, all 80 first turns, batch 16), at T = 1 under two more sampling seeds, so
# that the seeds' draw shows beside the heads' difference. Run from the project root in the venv; the heads are not
# committed (the README's commands rebuild them): F32 and BF16 name their checkpoint directories.
set -euo pipefail
F32=${F32:?the float32 2-layer head (deep/scratch2/deep2-target/checkpoint)}
BF16=${BF16:?the bfloat16 2-layer head (deep2-target-bfloat16/checkpoint)}
OUT=${OUT:-/tmp/bf16-t1}
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  dataset=mt-bench dataset.num_prompts=null strategy=eagle strategy.k=3 sampling.temperature=1 \
  strategy.checkpoint=$F32,$BF16 sampling.seed=${SEEDS:-1,2} hydra.sweep.dir=$OUT 'hydra.sweep.subdir=${hydra.job.num}' \
  2>&1 | tr '\r' '\n' | grep -E "^results:|acceptance length|Error"
# Then, from the project root, with the jobs in experiments/drafters/deep/bf16/cpu-t1/ (0, 1: float32 at seeds 1, 2;
# 2, 3: bfloat16 at seeds 1, 2), each seed's pair against each other:
#   D=experiments/drafters/deep/bf16/cpu-t1; for pr in "0 2" "1 3"; do set -- $pr; python -m specbench.report $D \
#     --against $D/$1 --out /tmp/t1p | sed -n '/^## AL against/,/^Not compared/p' | grep -E "^## AL against|^\| $2 " \
#     | head -2 | sed "s/^## AL against/bfloat16 head (job $2) against/"; done > $D/paired.txt
