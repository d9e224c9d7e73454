"""Side by side in one run: the CPU products decoder._linear can take for 1..8 rows, on SmolLM2-135M's weight shapes,
each shape's weights streaming from memory as in a forward (30 copies of each layer shape, 3 of the 49152-row LM
head; a loop over one warm weight ranks them otherwise). Prints ms per forward's worth of products (30 layers of
qkv, o, gate_up, down, plus the LM head once) for each form and row count.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_gemm_forms.py

Forms: F.linear; `weight @ x.T` (x row-major); the same with x.T made contiguous (the path a column-major input
reaches); `weight @ x.T` on the rows padded with zero rows to 2 / 4 / one more; and, for reference (not used by the
decoder: each needs its own packed copy of every weight), oneDNN's fp32 linear on weights packed for 1 and 4 rows.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576)]  # qkv, o, gate_up, down, LM head
COPIES = [30, 30, 30, 30, 3]
ROWS = (1, 2, 3, 4, 5, 6, 8)


def padded(x: torch.Tensor, to: int) -> torch.Tensor:
    return torch.cat([x, x.new_zeros(to - x.shape[0], x.shape[1])]) if to > x.shape[0] else x


FORMS = {
    "F.linear": lambda x, w: F.linear(x, w),
    "weight @ x.T": lambda x, w: w @ x.T,
    "weight @ x.T.contiguous()": lambda x, w: w @ x.T.contiguous(),
    "pad to 2 (1 row)": lambda x, w: w @ padded(x, 2).T if x.shape[0] == 1 else None,
    "pad to 4 (3 rows)": lambda x, w: w @ padded(x, 4).T if x.shape[0] == 3 else None,
    "pad one more (odd)": lambda x, w: w @ padded(x, x.shape[0] + 1).T if x.shape[0] % 2 else None,
}


def per_forward(form, rows: int, weights: list[list]) -> float | None:
    total = 0.0
    for (n, k), ws, copies in zip(SHAPES, weights, COPIES):
        x = torch.randn(rows, k)
        if form(x, ws[0]) is None:
            return None
        start = time.perf_counter()
        for _ in range(4):
            for w in ws:
                form(x, w)
        total += (time.perf_counter() - start) / 4 / copies * (30 if n != 49152 else 1)
    return total * 1e3


def main() -> None:
    torch.manual_seed(0)
    weights = [[torch.randn(n, k) for _ in range(c)] for (n, k), c in zip(SHAPES, COPIES)]
    forms = dict(FORMS)
    try:
        for hint in (1, 4):
            packed = [[torch.ops.mkldnn._reorder_linear_weight(w, hint) for w in ws] for ws in weights]
            forms[f"oneDNN fp32 packed for {hint}"] = (packed, lambda x, p: torch.ops.mkldnn._linear_pointwise(
                x, p, None, "none", [], ""))
    except (AttributeError, RuntimeError) as e:
        print(f"oneDNN fp32 packing unavailable: {e}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms per forward's products")
    print("| form | " + " | ".join(f"{m} rows" for m in ROWS) + " |")
    print("| --- |" + " --- |" * len(ROWS))
    for name, form in forms.items():
        ws, fn = form if isinstance(form, tuple) else (weights, form)
        cells = []
        for m in ROWS:
            per_forward(fn, m, ws)  # untimed: allocation, first-use setup
            t = per_forward(fn, m, ws)
            cells.append("-" if t is None else f"{t:.1f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
