"""Probe (H200), measurement only: what one 1-token forward of the batch-1 draft costs against the target's, to
split issue 9's batch-1 gap. frontdoor-run5/b1-8b.txt reads as r = 4.60 / 4.69 = 0.98 and a draft pass of ~1.15 ms
(39% of an 8.85 ms step over 3 passes): c ~0.25, where the weights' ratio (0.6B / 8B) would give ~0.08.
For Qwen3-0.6B and Qwen3-8B (random weights, our decoder, batch-invariant kernels, a 256-token prefix): an eager
1-token forward, the same forward replayed from a CUDA graph, and the GPU time of its kernels (count, sum, the
largest by name), so launch cost and kernel cost can be told apart. Since run 2 (2026-12-02, night) the replay is
timed in each launch mode (`MODES`: plain launches and programmatic dependent launch of the GEMMs), alternating,
with the logits compared bit for bit across modes; the profile is the last mode's. Run 2 also timed a third mode
that prefetched the GEMMs' weights into L2 (probe_draft-run2.txt); it measured slower and was removed after 61df131.

    python3 experiments/gpu/probe_draft.py > $OUT/probe_draft.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import alternate, capture, kernel_times, one_token_forward, run  # noqa: E402

from specbench.kernels.decode import use_pdl  # noqa: E402

MODES = ("plain", "pdl")  # engine.pdl=false; dependent launch


def probe(name: str, dev: torch.device) -> None:
    fwd = one_token_forward(name, dev)
    for _ in range(3):  # the invariant GEMMs tune their configurations outside the capture
        fwd()
    torch.cuda.synchronize()
    eager = do_bench(fwd, warmup=5, rep=50, return_mode="median")
    graphs, logits = {}, {}
    for mode in MODES:  # one graph per launch mode, captured over the same buffers; replays alternate below
        use_pdl(mode != "plain")
        graphs[mode], logits[mode] = capture(fwd)
    times = alternate(graphs)
    replay = times[MODES[-1]]
    same = all(torch.equal(logits[m], logits[MODES[0]]) for m in MODES)
    print(f"{name}: graph replay ms by launch mode (median of 5 alternating rounds): "
          + ", ".join(f"{m} {t:.3f}" for m, t in times.items())
          + f"; logits bit-identical across modes: {same}", flush=True)
    by_name, count = kernel_times(fwd, width=60)
    total = sum(by_name.values()) / 1e3
    print(f"{name}: eager {eager:.3f} ms, graph replay {replay:.3f} ms, kernels {total:.3f} ms in {count}",
          flush=True)
    for kname, us in by_name.most_common(8):
        print(f"    {us / 1e3:.3f} ms  {kname}", flush=True)


if __name__ == "__main__":
    run(probe)
