#!/usr/bin/env bash
# Acceptance of the committed drafters on SmolLM2-135M (CPU, fp32, T=0, k=3, 64 new tokens, one batch of 10).
#   MT-Bench turn 1, first 10 prompts (held out from training), then the first 10 Spec-Bench `qa`
#   prompts, which ARE training prompts (an in-distribution sanity check of the strategy, not a result).
run() {  # name strategy checkpoint dataset-overrides...
  local name=$1 strategy=$2 ckpt=$3; shift 3
  OMP_NUM_THREADS=2 python -m specbench strategy=$strategy strategy.checkpoint=$ckpt strategy.k=3 "$@" \
    max_new_tokens=64 engine.batch_size=10 baseline=false logger=none \
    output_dir=experiments/drafters/runs/$name > experiments/drafters/runs/$name.log 2>&1
}
run eagle-mtbench10 eagle specbench/checkpoints/eagle-smollm2-135m dataset=mt-bench dataset.num_prompts=10
run eagle-qa10-train eagle specbench/checkpoints/eagle-smollm2-135m dataset=jsonl \
  dataset.path=experiments/drafters/spec_bench_qa_first10_TRAINING_PROMPTS.jsonl
run medusa-mtbench10 medusa specbench/checkpoints/medusa-smollm2-135m dataset=mt-bench dataset.num_prompts=10
