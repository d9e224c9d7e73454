"""Is one SDPA call over several queries bit-identical, per query, to single-query calls on this CPU (bf16,
SmolLM2's 9 query / 3 key-value heads of 64)? Random prefixes P and windows T, two layouts:

- "causal": T queries at P..P+T-1 over the P+T keys with a causal mask, against each query over its own P+j+1 keys;
- "bucketed": both padded to the same 64-key bucket with the same mask, queries grouped by bucket.

    python experiments/cpu/sdpa_invariance.py        # counts of bit-identical query outputs, at 2 then 1 thread
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BUCKET = 64


def sdpa(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[None, None], scale=0.125,
                                          enable_gqa=True)


def causal(trials: int, gen: torch.Generator) -> tuple[int, int]:
    same = total = 0
    for _ in range(trials):
        p, t = int(torch.randint(20, 900, (), generator=gen)), int(torch.randint(2, 10, (), generator=gen))
        k, v = (torch.randn(1, 3, p + t, 64, generator=gen).bfloat16() for _ in range(2))
        q = torch.randn(1, 9, t, 64, generator=gen).bfloat16()
        batched = sdpa(q, k, v, torch.arange(p + t)[None, :] <= (p + torch.arange(t))[:, None])
        for j in range(t):
            single = sdpa(q[:, :, j : j + 1].contiguous(), k[:, :, : p + j + 1], v[:, :, : p + j + 1])
            same, total = same + torch.equal(single[:, :, 0], batched[:, :, j]), total + 1
    return same, total


def bucketed(trials: int, gen: torch.Generator) -> tuple[int, int]:
    def up(x: int) -> int:
        return (x + BUCKET - 1) // BUCKET * BUCKET

    same = total = 0
    for _ in range(trials):
        p, t = int(torch.randint(20, 1500, (), generator=gen)), int(torch.randint(2, 17, (), generator=gen))
        k, v = (torch.randn(1, 3, up(p + t), 64, generator=gen).bfloat16() for _ in range(2))
        q = torch.randn(1, 9, t, 64, generator=gen).bfloat16()
        pos = p + torch.arange(t)
        for length in sorted({up(int(x) + 1) for x in pos}):
            idx = [j for j in range(t) if up(int(pos[j]) + 1) == length]
            keys = torch.arange(length)[None, :]
            batched = sdpa(q[:, :, idx], k[:, :, :length], v[:, :, :length], keys <= pos[idx][:, None])
            for n, j in enumerate(idx):
                single = sdpa(q[:, :, j : j + 1].contiguous(), k[:, :, :length], v[:, :, :length],
                              keys <= pos[j : j + 1][:, None])
                same, total = same + torch.equal(single[:, :, 0], batched[:, :, n]), total + 1
    return same, total


def main() -> None:
    for threads in (2, 1):
        torch.set_num_threads(threads)
        for name, check in (("causal", causal), ("bucketed", bucketed)):
            same, total = check(150, torch.Generator().manual_seed(0))
            print(f"{threads} thread(s), {name}: {same} / {total} query outputs bit-identical")


if __name__ == "__main__":
    main()
