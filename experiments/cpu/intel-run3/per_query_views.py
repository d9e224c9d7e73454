"""The CPU's per-query attention of SmolLM2-135M's 30 layers (9 query heads over 3 KV heads, head size 64, bf16),
one row whose T queries sit at positions 300.., as decoder._attend_per_query ran it before f13cf24 (each query's
cache slices taken per layer) and after (the views made once a forward, the queries split once a layer): ms a
forward's attention (100 forwards, two rounds each, in turns), and whether the outputs are bit-identical.
Run: python experiments/cpu/intel-run3/per_query_views.py"""
import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
L, B, HQ, HKV, D, S = 30, 1, 9, 3, 64, 1024
kcache, vcache = torch.randn(L, B, HKV, S, D).bfloat16(), torch.randn(L, B, HKV, S, D).bfloat16()


def before(qs, plan):
    out = []
    for i in range(L):
        q, kc, vc, t = qs[i], kcache[i, :B], vcache[i, :B], qs[i].shape[2]
        rows = []
        for b, steps in enumerate(plan):
            qb = q[b].transpose(0, 1).contiguous()
            kcb, vcb = kc[b : b + 1], vc[b : b + 1]
            outs = [None] * t
            for j, p in steps:
                outs[j] = F.scaled_dot_product_attention(qb[j][None, :, None], kcb[:, :, : p + 1], vcb[:, :, : p + 1],
                                                         scale=0.125, enable_gqa=True)
            rows.append(torch.cat(outs, 2))
        out.append(torch.cat(rows))
    return out


def after(qs, plan):
    views = [[(kcache[:, b : b + 1, :, : p + 1], vcache[:, b : b + 1, :, : p + 1]) for _, p in steps]
             for b, steps in enumerate(plan)]
    out = []
    for i in range(L):
        q, t = qs[i], qs[i].shape[2]
        layer_views = [[(kv[i], vv[i]) for kv, vv in row] for row in views]
        rows = []
        for b, steps in enumerate(plan):
            qb = q[b].transpose(0, 1).contiguous().view(t, HQ, 1, D).split(1)
            outs = [None] * t
            for (j, _), (keys, values) in zip(steps, layer_views[b]):
                outs[j] = F.scaled_dot_product_attention(qb[j], keys, values, scale=0.125, enable_gqa=True)
            rows.append(torch.cat(outs, 2))
        out.append(torch.cat(rows))
    return out


for t in (1, 3, 5):
    qs = [torch.randn(B, HQ, t, D).bfloat16() for _ in range(L)]
    plan = [[(j, 300 + j) for j in range(t)]]
    same = all(torch.equal(x, y) for x, y in zip(before(qs, plan), after(qs, plan)))
    times = {"before": [], "after": []}
    for _ in range(2):
        for f in (before, after):
            for _ in range(10):
                f(qs, plan)
            t0 = time.perf_counter()
            for _ in range(100):
                f(qs, plan)
            times[f.__name__].append((time.perf_counter() - t0) / 100 * 1e3)
    print(f"T={t}: before {' '.join(f'{x:.3f}' for x in times['before'])} ms, after "
          f"{' '.join(f'{x:.3f}' for x in times['after'])} ms; bit-identical: {same}")
