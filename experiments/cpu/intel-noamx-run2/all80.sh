#!/usr/bin/env bash
# The default job on all 80 MT-Bench first turns (dataset.num_prompts=null), after the row product, one process,
# nothing else running: bash experiments/cpu/intel-noamx-run2/all80.sh
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2/all80-$(git rev-parse --short HEAD).txt
.venv/bin/python -m specbench logger=none dataset.num_prompts=null 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $out
echo "all80: $(grep -E '^speedup \(|speed model|identical' $out | tr '\n' ' ')"
