"""The two many-token attention forms of grouped-attention.patch, outside the decoder (SmolLM2-135M's 9 query / 3
key-value heads of 64, bf16, random data): (1) whether each token's output in a call of several tokens is bit-identical
to the token alone, at 2 and 1 threads, keys at a fixed count with those past each token masked; (2) a call's time,
30 layers' caches in turn, against the per-query call (one token over exactly its p + 1 keys).

    python experiments/cpu/intel-run2/sdpa_forms.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F


def up(x: int) -> int:
    return (x + 63) // 64 * 64


def additive(seen: torch.Tensor) -> torch.Tensor:
    return torch.zeros(seen.shape, dtype=torch.bfloat16).masked_fill_(~seen, float("-inf"))


def grouped_invariance(gen: torch.Generator) -> dict[int, tuple[int, int]]:
    """"grouped": [1, 3, 3 x tokens, 64], a key-value head's 3 query heads as each token's rows. Per token count."""
    res: dict[int, tuple[int, int]] = {}
    for _ in range(300):
        p, tok = int(torch.randint(5, 1500, (), generator=gen)), int(torch.randint(2, 12, (), generator=gen))
        keys = up(p + tok)
        k, v = (torch.randn(1, 3, keys, 64, generator=gen).bfloat16() for _ in range(2))
        q = torch.randn(1, 3, 3 * tok, 64, generator=gen).bfloat16()
        mask = additive(torch.arange(keys)[None, :] <= p + torch.arange(tok)[:, None]).repeat_interleave(3, 0)[None, None]
        together = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)
        for j in range(tok):
            rows = slice(3 * j, 3 * j + 3)
            alone = F.scaled_dot_product_attention(q[:, :, rows], k, v, attn_mask=mask[:, :, rows], scale=0.125)
            same, total = res.get(tok, (0, 0))
            res[tok] = (same + torch.equal(alone, together[:, :, rows]), total + 1)
    return res


def heads_invariance(gen: torch.Generator) -> tuple[int, int]:
    """"heads": [1, 9 x tokens, 1, 64] under GQA, each (query head, token) a single-row task of its own."""
    same = total = 0
    for _ in range(150):
        n, keys = int(torch.randint(2, 9, (), generator=gen)), 64 * int(torch.randint(1, 12, (), generator=gen))
        k, v = (torch.randn(1, 3, keys, 64, generator=gen).bfloat16() for _ in range(2))
        pos = keys - 1 - torch.randint(0, 64, (n,), generator=gen)
        q = torch.randn(3, 3, n, 64, generator=gen).bfloat16()  # [key-value head, query head in its group, token]
        m = additive(torch.arange(keys)[None, :] <= pos[:, None])  # [n, keys]
        out = F.scaled_dot_product_attention(q.reshape(1, 9 * n, 1, 64), k, v, enable_gqa=True,
                                             attn_mask=m[None].expand(9, n, keys).reshape(1, 9 * n, 1, keys)).view(3, 3, n, 64)
        for j in range(n):
            one = F.scaled_dot_product_attention(q[:, :, j].reshape(1, 9, 1, 64), k, v, attn_mask=m[j][None, None, None],
                                                 enable_gqa=True).view(3, 3, 64)
            same, total = same + torch.equal(one, out[:, :, j]), total + 1
    return same, total


def timings() -> None:
    torch.set_num_threads(2)
    kc, vc = (torch.randn(30, 1, 3, 640, 64).bfloat16() for _ in range(2))

    def per_call_us(call) -> float:  # a call on each of the 30 layers' caches in turn
        for _ in range(5):
            for i in range(30):
                call(i)
        t0 = time.perf_counter()
        for _ in range(100):
            for i in range(30):
                call(i)
        return (time.perf_counter() - t0) / 3000 * 1e6

    for p in (150, 450):
        q1 = torch.randn(1, 9, 1, 64).bfloat16()
        row = {"per query, 1 token": per_call_us(lambda i: F.scaled_dot_product_attention(
            q1, kc[i, :, :, : p + 1], vc[i, :, :, : p + 1], enable_gqa=True))}
        for n in (1, 3, 5):
            keys = up(p + n)
            seen = torch.arange(keys)[None, :] <= p + torch.arange(n)[:, None]
            mg, qg = additive(seen).repeat_interleave(3, 0)[None, None], torch.randn(1, 3, 3 * n, 64).bfloat16()
            row[f"grouped, {n}"] = per_call_us(lambda i: F.scaled_dot_product_attention(
                qg, kc[i, :, :, :keys], vc[i, :, :, :keys], attn_mask=mg))
            mh = additive(seen)[None].expand(9, n, keys).reshape(1, 9 * n, 1, keys)
            qh = torch.randn(1, 9 * n, 1, 64).bfloat16()
            row[f"heads, {n}"] = per_call_us(lambda i: F.scaled_dot_product_attention(
                qh, kc[i, :, :, :keys], vc[i, :, :, :keys], attn_mask=mh, enable_gqa=True))
        print(f"prefix {p}, us a call: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))


def main() -> None:
    for threads in (2, 1):
        torch.set_num_threads(threads)
        res = grouped_invariance(torch.Generator().manual_seed(3))
        print(f"{threads} thread(s), grouped: tokens in the call -> bit-identical / token outputs: "
              + ", ".join(f"{t}: {s}/{n}" for t, (s, n) in sorted(res.items())))
    torch.set_num_threads(2)
    print("heads: bit-identical / token outputs: %d/%d" % heads_invariance(torch.Generator().manual_seed(9)))
    timings()


if __name__ == "__main__":
    main()
