#!/usr/bin/env bash
# Issue 15 item 4 on the nvidia-h200 device machine, through the CLI: a 3B-class VLM target (Qwen2.5-VL-3B, random
# weights) with the 0.6B text draft, on the fast path (FastVLMRunner: our decoder and CUDA graphs past the prefill)
# against the reference (engine.backend=transformers: the language model recomputes the prefix every forward), at
# 64 and 256 new tokens: a step's cost should not grow with the generated length on the fast path.
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/vlm/h200.sh "$OUT"
set -u
out=${1:-/tmp/vlm}; mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
common="logger=none engine.ignore_eos=true dataset=images dataset.num_prompts=6 target=qwen2.5-vl-3b-random draft=qwen3-0.6b-random strategy=draft_model strategy.k=3 verify.synthetic_acceptance_length=2.8"
timeout 250 python3 -m specbench -m $common max_new_tokens=64,256 hydra.sweep.dir="$out/fast" > "$out/fast.txt" 2>&1
timeout 250 python3 -m specbench -m $common engine.backend=transformers max_new_tokens=64,256 hydra.sweep.dir="$out/reference" \
  > "$out/reference.txt" 2>&1
grep -h -E "^\| (metric|acceptance length|TPOT ms|verify ms)|speedup \(|max_new_tokens=" "$out"/fast.txt "$out"/reference.txt
