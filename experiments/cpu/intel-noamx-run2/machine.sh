#!/usr/bin/env bash
# What the Intel Xeon without AMX does at its limits: a 2048^3 float32 product at 1 and 2 threads (GFLOP/s) and a
# 512 MB copy (GB/s, read + write), torch on this checkout's venv; then a self-draft at T=1 on 3 prompts (AL must be
# exactly k + 1 = 4.00). bash experiments/cpu/intel-noamx-run2/machine.sh > experiments/cpu/intel-noamx-run2/machine.txt
cd "$(git rev-parse --show-toplevel)"
lscpu | grep -E 'Model name|^CPU\(s\)|L3'
.venv/bin/python - <<'PY'
import time, torch
for th in (1, 2):
    torch.set_num_threads(th)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(2): a @ b
    s = time.perf_counter()
    for _ in range(5): a @ b
    print(f"{th} threads: 2048^3 float32 product {2 * 2048**3 / ((time.perf_counter() - s) / 5) / 1e9:.0f} GFLOP/s")
    x = torch.empty(512 << 18); y = torch.empty_like(x)
    for _ in range(2): y.copy_(x)
    s = time.perf_counter()
    for _ in range(5): y.copy_(x)
    print(f"{th} threads: 512 MB copy {2 * x.numel() * 4 / ((time.perf_counter() - s) / 5) / 1e9:.1f} GB/s (read + write)")
PY
echo "python -m specbench logger=none strategy=draft_model draft=self strategy.k=3 sampling.temperature=1 dataset.num_prompts=3"
.venv/bin/python -m specbench logger=none strategy=draft_model draft=self strategy.k=3 sampling.temperature=1 \
  dataset.num_prompts=3 2>&1 | tr '\r' '\n' | grep -E 'acceptance length|identical|speedup \('
