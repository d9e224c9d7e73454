"""Probe (H200), measurement only: what one 1-token forward of the batch-1 draft costs against the target's, to
split issue 9's batch-1 gap. frontdoor-run5/b1-8b.txt reads as r = 4.60 / 4.69 = 0.98 and a draft pass of ~1.15 ms
(39% of an 8.85 ms step over 3 passes): c ~0.25, where the weights' ratio (0.6B / 8B) would give ~0.08.
For Qwen3-0.6B and Qwen3-8B (random weights, our decoder, batch-invariant kernels, a 256-token prefix): an eager
1-token forward, the same forward replayed from a CUDA graph, and the GPU time of its kernels (count, sum, the
largest by name), so launch cost and kernel cost can be told apart. Since run 2 (2026-12-02, night) the replay is
timed in each launch mode (`MODES`: plain launches, programmatic dependent launch of the GEMMs, and that with their
weights prefetched into L2), alternating, with the logits compared bit for bit across modes; the profile is the
last mode's.

    python3 experiments/gpu/probe_draft.py > $OUT/probe_draft.txt
"""

from __future__ import annotations

import collections
import os
import statistics

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

from specbench.kernels import skinny_gemm
from specbench.kernels.decode import use_pdl
from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec

NAMES = os.environ.get("PROBE_MODELS", "qwen3-0.6b-random,qwen3-8b-random").split(",")
PREFIX = 256
MODES = ("plain", "pdl", "pdl+prefetch")  # engine.pdl=false; dependent launch alone; and with the GEMMs' L2 prefetch


def probe(name: str, dev: torch.device) -> None:
    model = load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model
    runner = DecoderRunner(model)
    runner.allocate(1, 1024)
    runner(torch.randint(0, 1000, (1, PREFIX), device=dev), torch.arange(PREFIX, device=dev)[None], attn_len=PREFIX)
    token = torch.randint(0, 1000, (1, 1), device=dev)
    position = torch.full((1, 1), PREFIX, device=dev)
    fwd = lambda: runner(token, position, attn_len=PREFIX + 1)  # noqa: E731
    for _ in range(3):  # the invariant GEMMs tune their configurations outside the capture
        fwd()
    torch.cuda.synchronize()
    eager = do_bench(fwd, warmup=5, rep=50, return_mode="median")
    graphs, logits = {}, {}
    for mode in MODES:  # one graph per launch mode, captured over the same buffers; replays alternate below
        use_pdl(mode != "plain")
        skinny_gemm.PREFETCH = mode == "pdl+prefetch"
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
    replay = statistics.median(times[MODES[-1]])
    same = all(torch.equal(logits[m], logits[MODES[0]]) for m in MODES)
    print(f"{name}: graph replay ms by launch mode (median of 5 alternating rounds): "
          + ", ".join(f"{m} {statistics.median(t):.3f}" for m, t in times.items())
          + f"; logits bit-identical across modes: {same}", flush=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fwd()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: collections.Counter[str] = collections.Counter()
    for e in kernels:
        by_name[e.name[:60]] += e.device_time
    total = sum(e.device_time for e in kernels) / 1e3
    print(f"{name}: eager {eager:.3f} ms, graph replay {replay:.3f} ms, kernels {total:.3f} ms in {len(kernels)}",
          flush=True)
    for kname, us in by_name.most_common(8):
        print(f"    {us / 1e3:.3f} ms  {kname}", flush=True)


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev), torch.__version__, flush=True)
    for name in NAMES:
        probe(name, dev)
        torch.cuda.empty_cache()  # the model, its cache and its graph went with probe()'s frame


if __name__ == "__main__":
    main()
