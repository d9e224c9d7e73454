#!/usr/bin/env bash
# Issue 15, continuous batching: the concurrency sweep through the CLI on the nvidia-h200 device machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash experiments/continuous/concurrency.sh "$OUT"
# Qwen3-8B target, Qwen3-0.6B draft (random weights), draft_model k=3 at synthetic AL 2.8, T=1, 256 requests
# (requests-256.jsonl). Stop behaviour: 1 token id in 64 ends a request (engine.stop_token_ids). At T=1 a
# random-weight model's tokens are close to uniform over its 151936 ids, so output lengths are close to geometric
# (mean ~56 under the 128-token cap), for target-only and speculative decoding alike.
set -u
out=${1:-/tmp/continuous}; mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
stops="engine.stop_token_ids=[$(seq -s, 0 64 151935)]"
common=(logger=none target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model strategy.k=3
        verify.synthetic_acceptance_length=2.8 sampling.temperature=1 dataset=jsonl
        dataset.path=experiments/continuous/requests-256.jsonl dataset.num_prompts=null max_new_tokens=128 "$stops")
# 1) continuous batching, 1 to 256 requests in flight (one process, five jobs)
timeout 400 python3 -m specbench -m "${common[@]}" engine.scheduler=continuous engine.batch_size=1,4,16,64,256 \
  hydra.sweep.dir="$out/continuous" 'hydra.sweep.subdir=${hydra.job.num}' > "$out/continuous.txt" 2>&1
# 2) static batches of 64 and 256 over the same requests
timeout 150 python3 -m specbench -m "${common[@]}" engine.scheduler=static engine.batch_size=64,256 \
  hydra.sweep.dir="$out/static" 'hydra.sweep.subdir=${hydra.job.num}' > "$out/static.txt" 2>&1
python3 experiments/continuous/table.py "$out/continuous" "$out/static" | tee "$out/table.md"
