#!/usr/bin/env bash
# (as ran on 2026-12-05; the new head unpacked from arena.tgz at /work/arena-head/checkpoint, not committed)
# both heads in one sweep on the CPU, as the seventh and eighth runs' cpu-al
set -euo pipefail
cd /work/main && . .venv/bin/activate
H=eagle-smollm2-135m,/work/arena-head/checkpoint
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  dataset=mt-bench dataset.num_prompts=null strategy=eagle strategy.k=3 sampling.temperature=0,1 \
  strategy.checkpoint=$H hydra.sweep.dir=/tmp/arena/cpu-al/chain 'hydra.sweep.subdir=${hydra.job.num}'
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  dataset=mt-bench dataset.num_prompts=null strategy=eagle_tree strategy.k=3 sampling.temperature=0 \
  strategy.checkpoint=$H hydra.sweep.dir=/tmp/arena/cpu-al/eagle_tree-k3 'hydra.sweep.subdir=${hydra.job.num}'
