#!/usr/bin/env bash
# Issue 12 on the nvidia-h200 device machine, through the CLI: what a 16-node tree verify costs against a 4-token
# chain verify (8B random target, 0.6B random draft; the verify forward's cost does not depend on what it accepts).
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/trees/h200.sh "$OUT"
set -u
out=${1:-/tmp/trees}; mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
common="logger=none engine.ignore_eos=true target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model dataset=builtin dataset.num_prompts=6 max_new_tokens=64"
# chain k=3: a 4-token verify (pending + 3 drafts), with the target-only baseline beside it
timeout 200 python3 -m specbench $common strategy.k=3 hydra.run.dir="$out/chain-k3" > "$out/chain-k3.txt" 2>&1
# top-4 tree of depth 4: 16 nodes + the pending token in one verify forward; and a top-2 tree of depth 3 (6 nodes)
timeout 200 python3 -m specbench -m $common baseline=false strategy.tree=topk strategy.k=4,3 strategy.top_k=4,2 \
  hydra.sweep.dir="$out/trees" > "$out/trees.txt" 2>&1
# EAGLE-2 style dynamic trees, depth 4, top-4 expansion, verify budgets of 8 and 16 nodes (the draft's frontier
# forwards go through the draft's graphs too)
timeout 200 python3 -m specbench -m $common baseline=false strategy.tree=dynamic strategy.k=4 strategy.top_k=4 \
  strategy.num_nodes=8,16 hydra.sweep.dir="$out/dynamic" > "$out/dynamic.txt" 2>&1
grep -h -E "^\| (metric|acceptance length|nodes verified|AL / verified|verify ms|TPOT ms)|speedup \(" "$out"/chain-k3.txt "$out"/trees.txt "$out"/dynamic.txt
