"""SDPA against attention written out, for the default tree verify's shapes (SmolLM2-135M: 9 query heads, 3 KV heads,
head dim 64, 305 keys), 1 and 5 queries, microseconds a call; printed in amd-run15 of experiments/cpu/README.md.

    OMP_NUM_THREADS=2 python experiments/cpu/amd-run15/attn_forms.py; OMP_NUM_THREADS=1 python experiments/cpu/amd-run15/attn_forms.py
"""
import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
hq, hkv, d, S = 9, 3, 64, 305
def bench(fn, n=2000):
    for _ in range(50):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter()-t)/n*1e6
for T in (1, 5):
    q = torch.randn(1, hq, T, d)
    kc = torch.randn(1, hkv, 512, d)
    vc = torch.randn(1, hkv, 512, d)
    pos = torch.arange(S - T, S)[None]
    mask = torch.arange(S)[None, None, None, :] <= pos[:, None, :, None]
    k, v = kc[:, :, :S], vc[:, :, :S]
    bias = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
    def sdpa(): return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=d**-0.5, enable_gqa=True)
    def sdpa_bias(): return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=d**-0.5, enable_gqa=True)
    def manual():
        qg = q.view(1, hkv, (hq // hkv) * T, d)
        s = torch.matmul(qg, k.transpose(-1, -2)).view(1, hkv, hq // hkv, T, S).mul_(d**-0.5).add_(bias[:, :, None])
        p = torch.softmax(s, -1).view(1, hkv, (hq // hkv) * T, S)
        return torch.matmul(p, v).view(1, hq, T, d)
    def nomask():
        return F.scaled_dot_product_attention(q, k, v, scale=d**-0.5, enable_gqa=True)
    ref = sdpa()
    print(T, "sdpa bool %.1f us" % bench(sdpa), "sdpa float %.1f" % bench(sdpa_bias), "manual %.1f" % bench(manual), "nomask %.1f" % bench(nomask),
          "maxdiff", (manual() - ref).abs().max().item())
