"""Side by side in one run: our decoder's forward on the CPU with F.linear everywhere (the default since 2026-12-02)
vs `weight @ x.T` for 2..8 rows (models/decoder.py's LINEAR_WT_ROWS = (2, 8), the default before).

    OMP_NUM_THREADS=2 python experiments/cpu/bench_linear.py

SmolLM2-135M (packaged weights), fp32; each (batch, new tokens) shape timed in 12 rounds of 3 forwards per
variant, the variants alternating round by round; prints the median ms per forward and the ratio.
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec


ROUNDS = 12


def main() -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    runner = dec.DecoderRunner(target.model)
    runner.allocate(16, 300)
    variants = {"F.linear": None, "weight @ x.T": (2, 8)}  # decoder.LINEAR_WT_ROWS
    shapes = ((1, 1), (1, 4), (1, 6), (4, 4), (16, 1), (16, 4))
    times: dict[tuple[int, int, str], list[float]] = {}
    try:
        for b, t in shapes:
            tokens = torch.randint(0, 1000, (b, t))
            positions = torch.arange(100, 100 + t)[None].expand(b, t)
            for _ in range(ROUNDS):  # variants alternate within each shape, so drift hits both alike
                for name, rows in variants.items():
                    dec.LINEAR_WT_ROWS = rows
                    runner(tokens, positions, attn_len=110)  # warm
                    t0 = time.perf_counter()
                    for _ in range(3):
                        runner(tokens, positions, attn_len=110)
                    times.setdefault((b, t, name), []).append((time.perf_counter() - t0) / 3 * 1e3)
    finally:
        dec.LINEAR_WT_ROWS = None
    print(f"torch threads: {torch.get_num_threads()}")
    print("| batch x new tokens | F.linear ms | weight @ x.T ms | F.linear / weight @ x.T |\n|---|---|---|---|")
    for b, t in shapes:
        old, new = (statistics.median(times[(b, t, n)]) for n in variants)
        print(f"| {b} x {t} | {old:.1f} | {new:.1f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
