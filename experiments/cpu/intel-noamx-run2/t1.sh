#!/usr/bin/env bash
# The default job at T=1 (sampling.temperature=1), after the row product, one process, nothing else running.
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2/t1-$(git rev-parse --short HEAD).txt
.venv/bin/python -m specbench logger=none sampling.temperature=1 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $out
echo "t1: $(grep -E '^speedup \(|speed model' $out | tr '\n' ' ')"
