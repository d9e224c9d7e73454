"""The GEMM share of the CPU default's r (verify forward / 1-token step): every product of SmolLM2-135M's forward
(30 layers x qkv, o, gate/up, down, then the LM head; packaged weights, float32) through the decoder's `_linear`
with the "auto" forms it picks per weight shape and row count, at 1 row (a target-only step) and 5 rows (the
default tree's verify), alternating round by round. Median ms per forward's products over ROUNDS rounds.

    OMP_NUM_THREADS=2 python experiments/cpu/gemm_rows.py
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

ROUNDS = 15


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    weights = [w[name] for w in runner._w for name in ("qkv_w", "o_w", "gu_w", "down_w")]
    weights.append(runner.lm_head.weight)
    times: dict[int, list[float]] = {1: [], 5: []}
    with torch.inference_mode():
        xs = {rows: {k: torch.randn(rows, k) for k in {w.shape[1] for w in weights}} for rows in times}

        def products(rows: int) -> None:
            for w in weights:
                dec._linear(xs[rows][w.shape[1]], w)

        for rows in times:  # the first pass times the forms ("auto")
            products(rows)
        for _ in range(ROUNDS):
            for rows in times:
                start = time.perf_counter()
                products(rows)
                times[rows].append(time.perf_counter() - start)
    one, five = (statistics.median(times[r]) * 1e3 for r in (1, 5))
    print(f"products of one forward: 1 row {one:.2f} ms, 5 rows {five:.2f} ms, ratio {five / one:.2f}")
    print("forms:", sorted({(k[3], v[0]) for k, v in dec._CPU_FORMS.items()}))


if __name__ == "__main__":
    main()
