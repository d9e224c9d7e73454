"""SDPA on the CPU at SmolLM2-135M's attention shape (9 query heads, 3 KV heads, head size 64) for 1 and 5 queries
over 300 and 600 cached keys: the decoder's float32 path (one SDPA call, a bool mask, enable_gqa), a hand-written one
(two matmuls and a softmax over the grouped queries) and SDPA on repeated KV heads. Microseconds per call, best of 5
rounds; "max diff" is the hand-written result against the decoder's.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_attention_rows.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

HQ, HKV, D = 9, 3, 64


def best_us(fn: Callable[[], torch.Tensor], reps: int = 300) -> float:
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps)
    return best * 1e6


def main() -> None:
    torch.manual_seed(0)
    g = HQ // HKV
    for s in (300, 600):
        for t in (1, 5):
            q = torch.randn(1, HQ, t, D)
            k, v = torch.randn(1, HKV, 1024, D)[:, :, :s], torch.randn(1, HKV, 1024, D)[:, :, :s]
            positions = torch.arange(s - t, s)[None]
            mask = torch.arange(s)[None, None, None, :] <= positions[:, None, :, None]  # [1, 1, T, S]

            def sdpa() -> torch.Tensor:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=D**-0.5, enable_gqa=True)

            def by_hand() -> torch.Tensor:
                scores = (q.view(1, HKV, g * t, D) @ k.transpose(-1, -2)) * D**-0.5
                scores = scores.view(1, HKV, g, t, s).masked_fill(~mask[:, :, None], float("-inf"))
                return (scores.softmax(-1).view(1, HKV, g * t, s) @ v).view(1, HQ, t, D)

            def repeated() -> torch.Tensor:
                return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                                      attn_mask=mask, scale=D**-0.5)

            diff = (sdpa() - by_hand()).abs().max().item()
            print(f"keys {s} queries {t}: SDPA + mask + GQA {best_us(sdpa):6.1f} us, by hand {best_us(by_hand):6.1f} us, "
                  f"SDPA on repeated KV {best_us(repeated):6.1f} us, max diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
