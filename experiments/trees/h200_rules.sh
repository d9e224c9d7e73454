#!/usr/bin/env bash
# Issue 12 on the nvidia-h200 device machine, through the CLI: what the tree acceptance rule costs inside a step, the
# Triton kernels (engine.triton_verify=true, the default on CUDA) beside the torch references (false), at T=0 and
# T=1, for the 16-node top-4 tree of depth 4 (8B random target, 0.6B random draft: nearly every first-level child is
# rejected, so at T=1 each row makes 4 residual passes and the draw). The chain at k=3 with the target-only
# baseline beside it gives the step it is measured against.
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/trees/h200_rules.sh "$OUT"
set -u
out=${1:-/tmp/trees-rules}; mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
common="logger=none engine.ignore_eos=true target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model dataset=builtin dataset.num_prompts=6 max_new_tokens=64"
timeout 120 python3 -m specbench $common strategy.k=3 sampling.temperature=1 hydra.run.dir="$out/chain-k3-t1" \
  > "$out/chain-k3-t1.txt" 2>&1
timeout 300 python3 -m specbench -m $common baseline=false strategy.tree=topk strategy.k=4 strategy.top_k=4 \
  sampling.temperature=0,1 engine.triton_verify=true,false hydra.sweep.dir="$out/tree16" > "$out/tree16.txt" 2>&1
grep -h -E "^\| (metric|acceptance length|nodes verified|verify ms|TPOT ms)|speedup \(|triton_verify|temperature" \
  "$out"/chain-k3-t1.txt "$out"/tree16.txt
