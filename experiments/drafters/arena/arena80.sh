#!/usr/bin/env bash
# (as ran on 2026-12-05, after cpu_al.sh; the new head at /work/arena-head/checkpoint, not committed)
# both heads on the 80 Arena-Hard requests of the twenty-second session's table (now in the new head's training set)
set -euo pipefail
cd /work/main && . .venv/bin/activate
while pgrep -f "[c]pu_al.sh" > /dev/null; do sleep 10; done
python -m specbench -m logger=none baseline=false dataset=jsonl dataset.path=experiments/drafters/arena-hard/arena80.jsonl \
  dataset.num_prompts=null strategy=eagle strategy.k=3 engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  strategy.checkpoint=eagle-smollm2-135m,/work/arena-head/checkpoint \
  hydra.sweep.dir=/tmp/arena/cpu-al/arena80 'hydra.sweep.subdir=${hydra.job.num}'
