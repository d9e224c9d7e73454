"""Probe (H200), measurement only: (A) where a continuous-batching admission's time goes, a [1, P] prefill of
Qwen3-8B and Qwen3-0.6B (random weights, our decoder, eager as admissions run), against [4, P] and [16, P];
(B) whether M-tiles of 128 rows with wide N tiles keep the invariant GEMM's bits (same split, same K chain) and
what they cost against today's invariant tiles and cuBLAS at M = 256..4096 (a batch-64 verify is 256 rows).

    python3 experiments/gpu/probe_prefill.py > $OUT/probe_prefill.txt
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

from specbench.kernels import skinny_gemm as sg
from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec

dev = torch.device("cuda")


def prefill_costs() -> None:
    for name in ("qwen3-8b-random", "qwen3-0.6b-random"):
        model = load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model
        runner = DecoderRunner(model)
        runner.allocate(16, 1024)
        for b, p in ((1, 64), (1, 128), (1, 256), (4, 128), (16, 128)):
            tokens = torch.randint(0, 1000, (b, p), device=dev)
            positions = torch.arange(p, device=dev).expand(b, p)
            last = torch.full((b, 1), p - 1, device=dev)
            fwd = lambda: runner(tokens, positions, attn_len=p, logits_at=last)  # noqa: E731
            ms = do_bench(fwd, warmup=3, rep=40, return_mode="median")
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                fwd()
                torch.cuda.synchronize()
            ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            gpu_ms = sum(e.device_time for e in ev) / 1e3
            print(f"prefill {name} [{b}, {p}]: {ms:.2f} ms wall, {gpu_ms:.2f} ms in {len(ev)} kernels", flush=True)
        runner = model = None
        torch.cuda.empty_cache()


SHAPES = {"qkv": (6144, 4096, False), "o": (4096, 4096, True), "gate_up": (24576, 4096, False),
          "down": (4096, 12288, True)}
BIG = [(128, 64, 8, 3), (128, 64, 4, 4), (64, 64, 4, 4), (128, 32, 4, 4), (256, 64, 8, 3), (128, 128, 8, 3)]


def big_m_tiles() -> None:
    torch.manual_seed(0)
    sms = sg._sms(dev)
    for name, (n, k, split_ok) in SHAPES.items():
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
        x = torch.randn(4096, k, device=dev, dtype=torch.bfloat16)
        split = sg.invariant_split(n, k, sms, split_ok)
        for m in (256, 1024, 4096):
            xm = x[:m]
            ref = sg.sum_partials(sg.invariant_linear(xm, w, may_split=split_ok), torch.bfloat16)
            t_inv = do_bench(lambda: sg.invariant_linear(xm, w, may_split=split_ok), warmup=10, rep=40,
                             return_mode="median")
            t_cub = do_bench(lambda: F.linear(xm, w), warmup=10, rep=40, return_mode="median")
            row = [f"{name} M={m} split={split}: invariant now {t_inv:.3f} ms, cuBLAS {t_cub:.3f} ms"]
            for bn, bk, warps, stages in BIG:
                cfg = (bn, bk, warps, stages, split)
                try:
                    y = sg.sum_partials(sg._launch(xm, w, None, cfg, split_ok, block_m=128), torch.bfloat16)
                    t = do_bench(lambda: sg._launch(xm, w, None, cfg, split_ok, block_m=128), warmup=10, rep=40,
                                 return_mode="median")
                    row.append(f"  128x{bn}x{bk} w{warps} s{stages}: {t:.3f} ms, same bits {torch.equal(y, ref)}")
                except Exception as e:  # noqa: BLE001
                    row.append(f"  128x{bn}x{bk} w{warps} s{stages}: {type(e).__name__}")
            print("\n".join(row), flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    big_m_tiles()
    prefill_costs()
