"""Probe (H200), measurement only: each of a decoder's GEMMs alone at batch 1, to see whether the 0.6B draft's
small GEMMs lose to a fixed cost per kernel (experiments/gpu/README.md, "Probe"). For each projection (qkv, o,
gate_up, down; the LM head once), a CUDA graph launches `invariant_linear` once per layer on that layer's own weights
(distinct weights, together larger than L2, so each launch streams from HBM as in a forward), and the replay time is
divided by the launches. For each configuration candidate that keeps the invariant split (`skinny_gemm._candidates`),
and for dependent launch on and off. Columns: us per launch, and the rate the weights stream at.

    python3 experiments/gpu/probe_gemm_shapes.py > $OUT/probe_gemm_shapes.txt
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import gemm_groups, graph_us  # noqa: E402

from specbench.kernels import skinny_gemm  # noqa: E402
from specbench.kernels.decode import use_pdl  # noqa: E402

NAMES = os.environ.get("PROBE_MODELS", "qwen3-0.6b-random,qwen3-8b-random").split(",")


def per_launch_us(ws: list[torch.Tensor], x: torch.Tensor, cfg: tuple, may_split: bool) -> float:
    return graph_us(lambda w: skinny_gemm.invariant_linear(x, w, may_split=may_split, config=cfg), ws)


def probe(name: str, dev: torch.device) -> None:
    layers, groups = gemm_groups(name, dev)
    sms = skinny_gemm._sms(dev)
    print(f"{name}: {layers} layers", flush=True)
    for key, ws, may_split in groups:
        n, k = ws[0].shape
        x = torch.randn((1, k), device=dev, dtype=torch.bfloat16)
        mb = n * k * 2 / 1e6
        rows = []
        for cfg in skinny_gemm._candidates(n, k, sms, may_split, invariant=True):
            for pdl in (False, True):
                use_pdl(pdl)
                try:
                    us = per_launch_us(ws, x, cfg, may_split)
                except Exception as e:  # noqa: BLE001 - a config that does not launch is listed as such
                    rows.append(f"    {cfg} pdl={pdl}: failed ({type(e).__name__})")
                    continue
                rows.append(f"    {cfg} pdl={pdl}: {us:7.2f} us  {mb / us:5.2f} TB/s")
        use_pdl(True)
        print(f"  {key} [{n} x {k}] {mb:.1f} MB, invariant split {skinny_gemm.invariant_split(n, k, sms, may_split)}"
              f", launches per graph {len(ws)}", flush=True)
        print("\n".join(rows), flush=True)


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev), torch.__version__, flush=True)
    for name in NAMES:
        probe(name, dev)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
