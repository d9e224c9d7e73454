#!/usr/bin/env bash
# thirty-fifth session (2026-12-06), a third CPU: an Intel Xeon with AVX512-BF16 and no AMX (lscpu: "Intel(R) Xeon(R)
# Processor", 2 cores). There oneDNN's bf16 product is not row-invariant for SmolLM2-135M's shapes, so engine.dtype=auto
# picks float32 and eagle_auto drafts eagle_tree's tree, as on the AMD EPYC. Main's default (eagle_auto) and the chain
# (eagle_adaptive, what eagle_auto drafts on the bf16 path) in turns, one process at a time, nothing else running.
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run1
for round in 1 2 3; do
  for s in eagle_auto eagle_adaptive; do
    .venv/bin/python -m specbench logger=none strategy=$s 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" \
      > $out/turns-$s-$round.txt
    echo "$s $round: $(grep -E '^speedup \(|speed model|identical' $out/turns-$s-$round.txt | tr '\n' ' ')"
  done
done
