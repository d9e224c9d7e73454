#!/usr/bin/env bash
# Continuous batching on the 2-core CPU with real weights and real stop behaviour: the embedded default (SmolLM2-135M,
# bf16 where bit-invariant, the shipped EAGLE head, k=3, T=0) on the first 32 MT-Bench questions, max_new_tokens=128,
# the model's own EOS. Run on an otherwise idle machine:   bash experiments/continuous/cpu.sh OUT
set -u
out=${1:-/tmp/continuous-cpu}; mkdir -p "$out"
common=(logger=none dataset.num_prompts=32 max_new_tokens=128)
python -m specbench -m "${common[@]}" engine.scheduler=continuous engine.batch_size=1,4,16 \
  hydra.sweep.dir="$out/continuous" > "$out/continuous.txt" 2>&1
python -m specbench -m "${common[@]}" engine.scheduler=static engine.batch_size=4,16 \
  hydra.sweep.dir="$out/static" > "$out/static.txt" 2>&1
python experiments/continuous/table.py "$out/continuous" "$out/static" | tee "$out/table.md"
