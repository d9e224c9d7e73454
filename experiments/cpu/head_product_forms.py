"""The shipped EAGLE head's six products (fc, qkv, o, gate_up, down, the 8192-id LM head) at 1, 2, 3 and 5 rows,
summed per pass, in four forms: F.linear on float16 copies, oneDNN's bf16 product on packed bf16 copies, oneDNN's
float32 product on packed copies, and `weight @ x.T` (padded to even rows); each over enough random copies of the
weight to stream from memory, median of 9. The measurement behind experiments/cpu/README.md's "Tried, not landed:
the EAGLE head's products in bf16" (2026-12-04; first run as a scratch script of the same loop).

    OMP_NUM_THREADS=2 python experiments/cpu/head_product_forms.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

import specbench.models.decoder as dec

SHAPES = [(576, 1152), (960, 576), (576, 576), (3072, 576), (576, 1536), (8192, 576)]  # fc, qkv, o, gate_up, down, LM


def main() -> None:
    torch.set_grad_enabled(False)
    for rows in (1, 2, 3, 5):
        total: dict[str, float] = {}
        for n, k in SHAPES:
            copies = max(1, min(64, (32 << 20) // (n * k * 4)))
            ws = [torch.randn(n, k) for _ in range(copies)]
            h16 = [w.half() for w in ws]
            pb = [dec._pack_onednn(w.bfloat16(), 8) for w in ws]
            p32 = [dec._pack_onednn(w, 8) for w in ws]
            x = torch.randn(rows, k)
            forms = {"fp16 linear": lambda: [F.linear(x.half(), a).float() for a in h16],  # noqa: B023
                     "bf16 packed": lambda: [dec._packed_linear(x.bfloat16(), a).float() for a in pb],  # noqa: B023
                     "fp32 packed": lambda: [dec._packed_linear(x, a) for a in p32],  # noqa: B023
                     "transposed": lambda: [dec._transposed(x, a, rows + rows % 2) for a in ws]}  # noqa: B023
            for run in forms.values():
                run()
            for name, run in forms.items():
                times = []
                for _ in range(9):
                    start = time.perf_counter()
                    run()
                    times.append((time.perf_counter() - start) / copies)
                total[name] = total.get(name, 0.0) + statistics.median(times) * 1e6
        print(f"{rows} rows, one pass's products: " + "  ".join(f"{k}: {v:.0f}us" for k, v in total.items()), flush=True)


if __name__ == "__main__":
    main()
