#!/usr/bin/env bash
# The training run behind specbench/checkpoints/{eagle,medusa}-smollm2-135m, on one H200 (device machine).
# The device has no network: the packaged SmolLM2 GGUF travels in two parts, and the wheels it lacks
# (hydra-core, omegaconf, antlr4, gguf, PyYAML) travel with it.
set -e
mkdir -p /root/stage
cp -r .cache/gpu/b/* /root/stage/
cat /root/stage/part_aa /root/stage/part_ab > /root/stage/SmolLM2-135M-Instruct.Q4_1.gguf
md5sum /root/stage/SmolLM2-135M-Instruct.Q4_1.gguf   # a1231443440b107ff29f02bdb38c9d0a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /root/stage/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
COMMON="target=smollm2-135m target.path=/root/stage/SmolLM2-135M-Instruct.Q4_1.gguf device=cuda logger=none seed=0
  data.path=/root/stage/question.jsonl data.cache_dir=/root/run/distill data.max_prompt_tokens=1024 data.max_new_tokens=256 data.samples=2 data.temperature=0.7
  data.batch_size=64 train.batch_size=16 train.ce_vocab=0 train.ce_positions=0 train.save_every=500 save_dtype=float16"
timeout 240 python3 -m specbench.train strategy=eagle strategy.unroll=3 train.steps=1500 train.lr=5e-4 train.warmup=100 \
  $COMMON output_dir=/root/run/eagle 2>&1 | tr '\r' '\n' | grep -v "it/s\]$" | tee $OUT/eagle.log | tail -5
mkdir -p $OUT/eagle $OUT/medusa
cp /root/run/eagle/checkpoint/* $OUT/eagle/ && cp /root/run/eagle/metrics.jsonl $OUT/eagle_metrics.jsonl
timeout 110 python3 -m specbench.train strategy=medusa strategy.num_heads=4 train.steps=1500 train.lr=1e-3 train.warmup=100 \
  $COMMON output_dir=/root/run/medusa 2>&1 | tr '\r' '\n' | grep -v "it/s\]$" | tee $OUT/medusa.log | tail -5
cp /root/run/medusa/checkpoint/* $OUT/medusa/ && cp /root/run/medusa/metrics.jsonl $OUT/medusa_metrics.jsonl
ls -la $OUT $OUT/eagle $OUT/medusa
