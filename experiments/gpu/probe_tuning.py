"""Probe (H200), measurement only: does tuning the invariant GEMMs on weights read from HBM (skinny_gemm.TUNE_FROM_HBM,
`_weight_copies`) pick faster configurations than tuning on one weight, which a small model's weights let L2 serve?
For Qwen3-0.6B and Qwen3-8B (random weights, batch 1, 1 token, 256-token prefix): tune in each mode from scratch,
capture a CUDA graph of the forward, then time the graphs alternately; print the configurations that differ and
whether the logits are bit-identical (every candidate sums in the same order, so they must be).

    python3 experiments/gpu/probe_tuning.py > $OUT/probe_tuning.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import alternate, capture, one_token_forward, run  # noqa: E402

from specbench.kernels import skinny_gemm  # noqa: E402

MODES = {"one weight (L2)": False, "from HBM": True}


def probe(name: str, dev: torch.device) -> None:
    fwd = one_token_forward(name, dev)
    graphs, logits, tuned = {}, {}, {}
    for mode, from_hbm in MODES.items():
        skinny_gemm._TUNED.clear()
        skinny_gemm.TUNE_FROM_HBM = from_hbm
        for _ in range(3):  # tunes outside the capture
            fwd()
        torch.cuda.synchronize()
        tuned[mode] = dict(skinny_gemm._TUNED)
        graphs[mode], logits[mode] = capture(fwd)
    times = alternate(graphs)
    a, b = MODES
    same = torch.equal(logits[a], logits[b])
    print(f"{name}: graph replay ms (median of 5 alternating rounds): "
          + ", ".join(f"{m} {t:.3f}" for m, t in times.items())
          + f"; logits bit-identical: {same}", flush=True)
    for key in tuned[a]:
        if tuned[a][key] != tuned[b].get(key):
            print(f"    {key}: {a} {tuned[a][key]}, {b} {tuned[b].get(key)}", flush=True)


if __name__ == "__main__":
    run(probe)
