#!/usr/bin/env bash
# (as ran on 2026-12-05, thirty-first session, after cpu_al.sh; the new head at /work/wide-head/checkpoint)
# both heads on the 80 Arena-Hard requests of the twenty-second session (in neither head's training set)
set -euo pipefail
cd /work/main && . .venv/bin/activate
while pgrep -f "[c]pu_al.sh" > /dev/null; do sleep 10; done
python -m specbench -m logger=none baseline=false dataset=jsonl dataset.path=experiments/drafters/arena-hard/arena80.jsonl \
  dataset.num_prompts=null strategy=eagle strategy.k=3 engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 \
  strategy.checkpoint=eagle-smollm2-135m,/work/wide-head/checkpoint \
  hydra.sweep.dir=/tmp/wide/cpu-al/arena80 'hydra.sweep.subdir=${hydra.job.num}'
