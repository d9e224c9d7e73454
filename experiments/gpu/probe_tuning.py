"""Probe (H200), measurement only: does tuning the invariant GEMMs on weights read from HBM (skinny_gemm.TUNE_FROM_HBM,
`_weight_copies`) pick faster configurations than tuning on one weight, which a small model's weights let L2 serve?
For Qwen3-0.6B and Qwen3-8B (random weights, batch 1, 1 token, 256-token prefix): tune in each mode from scratch,
capture a CUDA graph of the forward, then time the graphs alternately; print the configurations that differ and
whether the logits are bit-identical (every candidate sums in the same order, so they must be).

    python3 experiments/gpu/probe_tuning.py > $OUT/probe_tuning.txt
"""

from __future__ import annotations

import os
import statistics

import torch
from triton.testing import do_bench

from specbench.kernels import skinny_gemm
from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec

NAMES = os.environ.get("PROBE_MODELS", "qwen3-0.6b-random,qwen3-8b-random").split(",")
PREFIX = 256
MODES = {"one weight (L2)": False, "from HBM": True}


def probe(name: str, dev: torch.device) -> None:
    model = load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model
    runner = DecoderRunner(model)
    runner.allocate(1, 1024)
    runner(torch.randint(0, 1000, (1, PREFIX), device=dev), torch.arange(PREFIX, device=dev)[None], attn_len=PREFIX)
    token = torch.randint(0, 1000, (1, 1), device=dev)
    position = torch.full((1, 1), PREFIX, device=dev)
    fwd = lambda: runner(token, position, attn_len=PREFIX + 1)  # noqa: E731
    graphs, logits, tuned = {}, {}, {}
    for mode, from_hbm in MODES.items():
        skinny_gemm._TUNED.clear()
        skinny_gemm.TUNE_FROM_HBM = from_hbm
        for _ in range(3):  # tunes outside the capture
            fwd()
        torch.cuda.synchronize()
        tuned[mode] = dict(skinny_gemm._TUNED)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fwd()
        torch.cuda.current_stream().wait_stream(stream)
        graphs[mode] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[mode]):
            out = fwd()
        graphs[mode].replay()
        torch.cuda.synchronize()
        logits[mode] = out.logits.clone()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(5):
        for mode in MODES:
            times[mode].append(do_bench(graphs[mode].replay, warmup=5, rep=40, return_mode="median"))
    a, b = MODES
    same = torch.equal(logits[a], logits[b])
    print(f"{name}: graph replay ms (median of 5 alternating rounds): "
          + ", ".join(f"{m} {statistics.median(t):.3f}" for m, t in times.items())
          + f"; logits bit-identical: {same}", flush=True)
    for key in tuned[a]:
        if tuned[a][key] != tuned[b].get(key):
            print(f"    {key}: {a} {tuned[a][key]}, {b} {tuned[b].get(key)}", flush=True)


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev), torch.__version__, flush=True)
    for name in NAMES:
        probe(name, dev)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
