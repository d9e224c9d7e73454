#!/usr/bin/env bash
# Issue 9's speed runs, all through the CLI (python -m specbench), on the nvidia-h200 device machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/gpu/frontdoor.sh "$OUT"
# Each block is its own fresh process, so the first job of a process is what is timed first.
# BLOCKS="1 2" runs only those blocks (default: all three), for device commands under their time limit.
# EXTRA="engine.fused_mlp=false" adds overrides to every job (an A/B of a setting, each side a fresh process).
set -u
out=${1:-/tmp/frontdoor}; mkdir -p "$out"
blocks=" ${BLOCKS:-1 2 3} "
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
common="logger=none engine.ignore_eos=true ${EXTRA:-}"
# 1) 8B + 0.6B, synthetic AL 2.8, k=3, batch 1: batch-invariant kernels (the default, FIRST job of the process) vs the fastest
[[ $blocks == *" 1 "* ]] && timeout 200 python3 -m specbench -m $common target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model strategy.k=3 \
  verify.synthetic_acceptance_length=2.8 dataset=builtin max_new_tokens=128 engine.batch_invariant=true,false \
  hydra.sweep.dir="$out/b1-8b" > "$out/b1-8b.txt" 2>&1
# 2) 32B + 1.7B, synthetic AL 2.79, k=3, batch 1
[[ $blocks == *" 2 "* ]] && timeout 200 python3 -m specbench $common target=qwen3-32b-random draft=qwen3-1.7b-random strategy=draft_model strategy.k=3 \
  verify.synthetic_acceptance_length=2.79 dataset=builtin dataset.num_prompts=6 max_new_tokens=96 \
  hydra.run.dir="$out/b1-32b" > "$out/b1-32b.txt" 2>&1
# 3) 8B + 0.6B, batch 64, k=1 at the per-position rate of AL 2.8 at k=3 (0.7655), 128 mixed-length prompts
[[ $blocks == *" 3 "* ]] && timeout 200 python3 -m specbench -m $common target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model strategy.k=1 \
  "verify.synthetic_per_position=[0.7655]" dataset=jsonl dataset.path=experiments/gpu/mixed-128.jsonl dataset.num_prompts=null \
  engine.batch_size=64 max_new_tokens=64 engine.batch_invariant=true,false \
  hydra.sweep.dir="$out/b64-8b" > "$out/b64-8b.txt" 2>&1
grep -h -A16 "^| metric" "$out"/b*.txt | grep -v "^--$" | grep -E "metric|TPOT|tokens/s|speedup|draft/verify|identical|acceptance length"
