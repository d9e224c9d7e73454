"""Probe (H200): is the M-tiled Triton GEMM batch-invariant, what does invariance cost against the fast
path (per-M tuned skinny GEMM, cuBLAS), and are rows bit-identical across tile heights (16-row mma.sync
tiles vs 64/128-row wgmma tiles)? Usage: python3 experiments/gpu/probe_gemm.py  (writes $OUT/probe_gemm.json)"""
import json
import os
import torch
import torch.nn.functional as F
from triton.testing import do_bench
from specbench.kernels import skinny_gemm as sg

torch.manual_seed(0)
dev = "cuda"
shapes = {"qkv": (6144, 4096, False), "o": (4096, 4096, True), "gate_up": (24576, 4096, False),
          "down": (4096, 12288, True), "lm_head": (151936, 4096, False), "0.6b_o": (1024, 2048, True)}
res = {}
def full(y):
    return sg.sum_partials(y, torch.bfloat16)
for name, (n, k, split) in shapes.items():
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
    x = torch.randn(256, k, device=dev, dtype=torch.bfloat16)
    ref = full(sg.invariant_linear(x, w, may_split=split))
    row = {}
    for m in (1, 2, 4, 5, 16, 17, 64, 256):
        y = full(sg.invariant_linear(x[:m].contiguous(), w, may_split=split))
        same = torch.equal(y, ref[:m])
        t_inv = do_bench(lambda: sg.invariant_linear(x[:m], w, may_split=split), warmup=20, rep=60, return_mode="median")
        t_cub = do_bench(lambda: F.linear(x[:m], w), warmup=20, rep=60, return_mode="median")
        t_fast = do_bench(lambda: sg.skinny_linear(x[:m], w, may_split=split), warmup=20, rep=60, return_mode="median") if m <= 16 else None
        cub_same = torch.equal(F.linear(x[:m], w), F.linear(x, w)[:m])
        row[m] = dict(invariant_equal=same, cublas_rows_equal=cub_same, ms_invariant=t_inv, ms_cublas=t_cub, ms_fast=t_fast)
        print(name, m, row[m], flush=True)
    cfg = sg._TUNED[("inv", 16, n, k, split, False)]  # the 16-row tiles' (key since 2026-12-04)
    tiles = {}
    for bm in (16, 32, 64, 128):
        try:
            y = full(sg._launch(x, w, None, cfg, split, block_m=bm))
            tiles[bm] = dict(equal_to_16=torch.equal(y, ref),
                             ms_m1=do_bench(lambda: sg._launch(x[:1], w, None, cfg, split, block_m=bm), warmup=20, rep=60, return_mode="median"),
                             ms_m256=do_bench(lambda: sg._launch(x, w, None, cfg, split, block_m=bm), warmup=20, rep=60, return_mode="median"))
        except Exception as e:  # noqa: BLE001
            tiles[bm] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
        print(name, "block_m", bm, tiles[bm], flush=True)
    res[name] = dict(rows=row, tiles=tiles, cfg=cfg)
out = os.environ.get("OUT", "/tmp")
json.dump(res, open(os.path.join(out, "probe_gemm.json"), "w"), indent=1, default=str)

# stage 2: do larger tiles of another shape (BLOCK_M/N/K, warps, stages; the same split) keep rows bit-identical?
big = {}
for name, (n, k, split) in shapes.items():
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
    x = torch.randn(256, k, device=dev, dtype=torch.bfloat16)
    cfg = sg._TUNED[("inv", 16, n, k, split, False)]  # the 16-row tiles' (key since 2026-12-04)
    ref = full(sg._launch(x, w, None, cfg, split))
    for bm, bn, bk, warps, stages in [(64, 64, 64, 4, 4), (64, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 64, 64, 4, 4),
                                      (64, 64, 128, 4, 3), (128, 256, 64, 8, 3), (64, 256, 64, 8, 3)]:
        c = (bn, bk, warps, stages, cfg[4])
        key = f"{name} {bm}x{bn}x{bk} w{warps} s{stages} split{cfg[4]}"
        try:
            y = full(sg._launch(x, w, None, c, split, block_m=bm))
            big[key] = dict(equal=torch.equal(y, ref),
                            ms_m64=do_bench(lambda: sg._launch(x[:64], w, None, c, split, block_m=bm), warmup=20, rep=60, return_mode="median"),
                            ms_m256=do_bench(lambda: sg._launch(x, w, None, c, split, block_m=bm), warmup=20, rep=60, return_mode="median"),
                            cublas_m256=do_bench(lambda: F.linear(x, w), warmup=20, rep=60, return_mode="median"))
        except Exception as e:  # noqa: BLE001
            big[key] = dict(error=f"{type(e).__name__}: {str(e)[:120]}")
        print(key, big[key], flush=True)
json.dump(dict(res=res, big=big), open(os.path.join(out, "probe_gemm.json"), "w"), indent=1, default=str)
