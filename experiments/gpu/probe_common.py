"""What the forward probes share (probe_draft.py, probe_tuning.py, probe_batch64.py): a model's 1-token forward at a
256-token prefix on our decoder, its capture into a CUDA graph, alternating timing of several graphs, and the GPU
time of a call by kernel."""

from __future__ import annotations

import collections
import os
import statistics
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec

NAMES = os.environ.get("PROBE_MODELS", "qwen3-0.6b-random,qwen3-8b-random").split(",")
PREFIX = 256


def one_token_forward(name: str, dev: torch.device) -> Callable[[], object]:
    """The preset's batch-1, 1-token forward at a PREFIX-token prefix (random weights, bf16, our decoder)."""
    model = load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model
    runner = DecoderRunner(model)
    runner.allocate(1, 1024)
    runner(torch.randint(0, 1000, (1, PREFIX), device=dev), torch.arange(PREFIX, device=dev)[None], attn_len=PREFIX)
    token = torch.randint(0, 1000, (1, 1), device=dev)
    position = torch.full((1, 1), PREFIX, device=dev)
    return lambda: runner(token, position, attn_len=PREFIX + 1)


def capture(fwd: Callable[[], object]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """A CUDA graph of `fwd` (warmed on a side stream first) and the logits of its first replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fwd()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fwd()
    graph.replay()
    torch.cuda.synchronize()
    return graph, out.logits.clone()


def alternate(graphs: dict[str, torch.cuda.CUDAGraph], rounds: int = 5) -> dict[str, float]:
    """Median replay ms of each graph over `rounds` rounds that time them in turn (so drift hits all alike)."""
    times: dict[str, list[float]] = {mode: [] for mode in graphs}
    for _ in range(rounds):
        for mode, graph in graphs.items():
            times[mode].append(do_bench(graph.replay, warmup=5, rep=40, return_mode="median"))
    return {mode: statistics.median(t) for mode, t in times.items()}


def kernel_times(fn: Callable[[], object], width: int = 70) -> tuple[collections.Counter[str], int]:
    """GPU microseconds of one call of `fn` by kernel name (cut to `width` characters), and how many kernels ran."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: collections.Counter[str] = collections.Counter()
    for e in kernels:
        by_name[e.name[:width]] += e.device_time
    return by_name, len(kernels)


def graph_us(launch: Callable[[torch.Tensor], object], ws: list[torch.Tensor]) -> float:
    """Microseconds per launch of `launch(w)`, one launch per weight of `ws` inside one CUDA graph (distinct weights,
    so each launch streams its own from HBM, as in a forward), median replay over the launches."""
    for w in ws[:2]:
        launch(w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in ws:
            launch(w)
    return 1e3 * do_bench(graph.replay, warmup=5, rep=60, return_mode="median") / len(ws)


def gemm_groups(name: str, dev: torch.device) -> tuple[int, list[tuple[str, list[torch.Tensor], bool]]]:
    """The preset's layer count and its GEMM weights by projection (random weights, bf16, our decoder): (name, one
    weight per layer, whether the product may split K); the LM head last, once."""
    runner = DecoderRunner(load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model)
    fields = {"qkv": ("qkv_w", False), "o": ("o_w", True), "gate_up": ("gu_w", False), "down": ("down_w", True)}
    groups = [(key, [w[field] for w in runner._w], split) for key, (field, split) in fields.items()]
    return len(runner._w), groups + [("lm_head", [runner.lm_head.weight], False)]


def run(probe: Callable[[str, torch.device], None]) -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev), torch.__version__, flush=True)
    for name in NAMES:
        probe(name, dev)
        torch.cuda.empty_cache()  # the model, its cache and its graphs went with probe()'s frame
