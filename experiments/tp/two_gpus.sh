#!/usr/bin/env bash
# Issue 15 item 1 on a machine with two H200s (nvidia-h200-x2), through the CLI. Not run yet: no two-GPU machine
# has been lent to this project so far. Each rank loads the whole target on its GPU and keeps its share
# (models/tensor_parallel.py), so a target must fit one GPU to be split: Qwen3-32B does (64 GB + 32 GB of shards).
# A 70B-class target (141 GB in bf16) does not: with engine.shard_on_load=true each rank builds only its share of
# the random weights (70 GB each; loading._random_model).
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/tp/two_gpus.sh "$OUT"
set -u
out=${1:-/tmp/tp}; mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
common="logger=none engine.ignore_eos=true dataset=builtin dataset.num_prompts=6 max_new_tokens=128"
# target-only TPOT at TP=1 and TP=2 (aim: TP=2 <= 0.6x TP=1)
timeout 500 python3 -m specbench -m $common target=qwen3-32b-random strategy=none engine.tensor_parallel=1,2 \
  hydra.sweep.dir="$out/32b-none" > "$out/32b-none.txt" 2>&1
# with the 1.7B draft at synthetic AL 2.79, k=3, at TP=2 (aim: speedup >= 2.0x)
timeout 500 python3 -m specbench $common target=qwen3-32b-random draft=qwen3-1.7b-random strategy=draft_model \
  strategy.k=3 verify.synthetic_acceptance_length=2.79 engine.tensor_parallel=2 hydra.run.dir="$out/32b-tp2-draft" \
  > "$out/32b-tp2-draft.txt" 2>&1
# a 70B-class target at TP=2, each rank building its share, with the 1B draft at synthetic AL 2.8, k=3
timeout 500 python3 -m specbench $common target=llama-3.1-70b-instruct-random draft=llama-3.2-1b-random \
  strategy=draft_model strategy.k=3 verify.synthetic_acceptance_length=2.8 engine.tensor_parallel=2 \
  engine.shard_on_load=true hydra.run.dir="$out/70b-tp2-draft" > "$out/70b-tp2-draft.txt" 2>&1
# transformers' own forward split by its tp_plan="auto" (engine.backend=transformers), 8B + 0.6B at k=3, TP=1 and 2:
# that it runs, its TPOT, and on how many prompts T=0 output equals target-only decoding. transformers' bf16 forward
# is not batch-invariant (our decoder is), so this path does not promise bit-exact output on the GPU
timeout 500 python3 -m specbench -m $common target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model \
  strategy.k=3 engine.backend=transformers engine.tensor_parallel=1,2 hydra.sweep.dir="$out/8b-hf-tp" \
  > "$out/8b-hf-tp.txt" 2>&1
# the suite's TP test (self-draft exact at TP=2)
timeout 500 python3 -m pytest -m gpu tests/gpu -k tensor_parallel -v -rfE -p no:cacheprovider > "$out/suite-tp.txt" 2>&1
grep -h -E "^\| (metric|acceptance length|TPOT ms)|speedup \(|identical|passed|failed" "$out"/*.txt
