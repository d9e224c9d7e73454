#!/usr/bin/env bash
# (as ran on 2026-12-05, thirty-first session; the new head unpacked from wide.tgz at /work/wide-head/checkpoint)
# both heads in one sweep on the CPU, as the ninth run's arena/cpu_al.sh
set -euo pipefail
cd /work/main && . .venv/bin/activate
H=eagle-smollm2-135m,/work/wide-head/checkpoint
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  dataset=mt-bench dataset.num_prompts=null strategy=eagle strategy.k=3 sampling.temperature=0,1 \
  strategy.checkpoint=$H hydra.sweep.dir=/tmp/wide/cpu-al/chain 'hydra.sweep.subdir=${hydra.job.num}'
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  dataset=mt-bench dataset.num_prompts=null strategy=eagle_tree strategy.k=3 sampling.temperature=0 \
  strategy.checkpoint=$H hydra.sweep.dir=/tmp/wide/cpu-al/eagle_tree-k3 'hydra.sweep.subdir=${hydra.job.num}'
# then (added after the gates' T = 1 figures, below in the README): the default's tree at T = 1 on all 80 prompts, both heads
# (the shipped head is the previous one here: this ran before the new head was copied into specbench/checkpoints)
# (/tmp/old-head: the previous head, `git show 904a2ad:specbench/checkpoints/eagle-smollm2-135m/...`)
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  dataset=mt-bench dataset.num_prompts=null strategy=eagle_tree strategy.k=3 sampling.temperature=1 \
  strategy.checkpoint=/tmp/old-head,/work/wide-head/checkpoint hydra.sweep.dir=/tmp/wide/cpu-al/eagle_tree-k3-t1 'hydra.sweep.subdir=${hydra.job.num}'
