"""Probe (H200), measurement only: the batch-invariant GEMM at 128 rows (a batch-64 verify of 2 tokens a row), where
run 7 found the 8B's invariant kernels at 6.56 ms against cuBLAS's ~4.4 (experiments/gpu/README.md, run 7).

For each projection of Qwen3-8B and Qwen3-0.6B (random weights, bf16; the LM head once), a CUDA graph launches the
product once per layer on that layer's own weight (so each launch streams from HBM, as in a forward), at M = 128:
cuBLAS (F.linear), then `_skinny_kernel` with 128-row tiles for every configuration in an extended candidate list
(those that keep `invariant_split`), and with 64-row tiles (`invariant_block_m`'s largest) for the small candidates.
Every candidate's output (or fp32 partials) is compared bit for bit with the same rows computed one at a time by the
16-row tiles (what a batch-1 forward computes): "bits ok" is the invariance the tuner may not break.

    python3 experiments/gpu/probe_wide.py > $OUT/probe_wide.txt
    PROBE_ROWS=1 python3 experiments/gpu/probe_wide.py > $OUT/probe_rows1.txt

PROBE_ROWS=1..16 (a batch-1 step or verify) times the 16-row tiles' candidates instead, at that M; "tuner's pick" is
then what `invariant_linear` tunes for that call (on 16 rows of noise).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import gemm_groups, graph_us, run  # noqa: E402

from specbench.kernels import skinny_gemm  # noqa: E402

M = int(os.environ.get("PROBE_ROWS", "128"))
# (BLOCK_N, BLOCK_K, num_warps, num_stages) for 128-row tiles: the shipped list first, then more
EXTRA_WIDE = [(64, 64, 4, 3), (64, 128, 4, 3), (64, 64, 4, 5), (128, 64, 4, 5), (128, 64, 8, 4), (128, 128, 4, 3),
              (256, 64, 8, 4), (256, 128, 8, 3), (64, 128, 8, 4), (32, 64, 4, 4), (32, 128, 4, 4), (128, 256, 8, 2),
              (64, 256, 4, 3), (256, 32, 8, 4)]
OLD_WIDE = skinny_gemm._WIDE_CANDIDATES[:6]  # the 128-row candidates until 5ae7ceb; "(new)" marks the others


def reference(x: torch.Tensor, w: torch.Tensor, may_split: bool) -> torch.Tensor:
    """Row by row through the 16-row tiles (the invariant path at M = 1, its tuned configuration)."""
    return torch.cat([skinny_gemm.invariant_linear(x[i : i + 1], w, may_split=may_split) for i in range(x.shape[0])],
                     dim=-2)


def probe(name: str, dev: torch.device) -> None:
    layers, groups = gemm_groups(name, dev)
    sms = skinny_gemm._sms(dev)
    print(f"{name}: {layers} layers, M = {M}", flush=True)
    gen = torch.Generator(device=dev).manual_seed(0)
    for key, ws, may_split in groups:
        n, k = ws[0].shape
        split = skinny_gemm.invariant_split(n, k, sms, may_split)
        x = torch.randn((M, k), device=dev, dtype=torch.bfloat16, generator=gen)
        mb = n * k * 2 / 1e6
        ref = reference(x, ws[0], may_split)
        rows = [f"    cuBLAS F.linear: {graph_us(lambda w: F.linear(x, w), ws):8.2f} us"]
        if M <= 16:
            cands = [(c[:4], 16) for c in skinny_gemm._candidates(n, k, sms, may_split, invariant=True, height=64)]
        else:
            cands = [(c, 128) for c in skinny_gemm._WIDE_CANDIDATES + EXTRA_WIDE]
            cands += [(c[:4], 64) for c in skinny_gemm._candidates(n, k, sms, may_split, invariant=True, height=64)]
        best = None
        for (bn, bk, warps, stages), block_m in cands:
            if split > 1 and k % (split * bk):
                continue
            cfg = (bn, bk, warps, stages, split)
            launch = lambda w, cfg=cfg, block_m=block_m: skinny_gemm._launch(x, w, None, cfg, may_split,  # noqa: E731
                                                                             block_m=block_m)
            try:
                same = torch.equal(launch(ws[0]), ref)
                us = graph_us(launch, ws)
            except Exception as e:  # noqa: BLE001 - a config that does not launch is listed as such
                rows.append(f"    {cfg} tile {block_m}: failed ({type(e).__name__})")
                continue
            new = cfg[:4] not in OLD_WIDE if block_m == 128 else cfg[:4] in skinny_gemm._TALL_CANDIDATES
            tag = " (new)" if new else ""
            rows.append(f"    {cfg} tile {block_m}: {us:8.2f} us  {mb / us:5.2f} TB/s  bits {'ok' if same else 'DIFFER'}{tag}")
            if same and (best is None or us < best[0]):
                best = (us, cfg, block_m)
        skinny_gemm.invariant_linear(x, ws[0], may_split=may_split)  # tunes as a forward would
        tuned = skinny_gemm._TUNED[("inv-wide" if M > 64 else "inv", skinny_gemm.tune_bucket(M), n, k, may_split, False)]
        print(f"  {key} [{n} x {k}] {mb:.1f} MB, split {split}, {len(ws)} launches; tuner's pick {tuned}; "
              f"best with same bits: {best}", flush=True)
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    run(probe)  # PROBE_MODELS picks the presets (probe_common.NAMES); the runs in wide-run1/ named 8B, 0.6B (, 1.7B)
