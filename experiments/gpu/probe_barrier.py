"""Probe (H100/H200), measurement only: what a grid barrier costs next to a kernel boundary, to size the next fusion
(run 10 of experiments/gpu/README.md: the MLP in one launch saved 1.9 us a layer on the H200, two boundaries
for one barrier). Every launch streams 8 MB of weights (one 0.6B-sized GEMM's worth, split over the programs) in
B + 1 phases separated by B grid barriers, `skinny_gemm._mlp_kernel`'s own (`_grid_arrive`, `_grid_wait`); the same work as B + 1 separate
launches (dependent launch on Hopper, as the decoder's GEMMs) is the comparison. 28 launches a graph (one per
layer), each on its own buffer, median of 5 alternating rounds.

    python3 experiments/gpu/probe_barrier.py
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from specbench.kernels.skinny_gemm import _grid_arrive, _grid_wait

LAYERS, MB = 28, 8


@triton.jit
def _phases(w_ptr, out_ptr, bar_ptr, per_phase, PHASES: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """PHASES phases, each summing this program's share of one slice of w, with a grid barrier between phases."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros([BLOCK], tl.float32)
    for p in tl.static_range(PHASES):
        base = p * per_phase + pid * (per_phase // nprog)
        for k in range(0, per_phase // nprog, BLOCK):
            acc += tl.load(w_ptr + base + k + tl.arange(0, BLOCK)).to(tl.float32)
        if p < PHASES - 1:  # the barrier of skinny_gemm._mlp_kernel
            gen, arrived = _grid_arrive(bar_ptr)
            _grid_wait(bar_ptr, gen, arrived, nprog)
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


def graph_of(launch) -> torch.cuda.CUDAGraph:
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return graph


class Streams(NamedTuple):
    """The probe's buffers: LAYERS weight slabs of about MB megabytes each, and where the programs write."""
    sms: int
    pdl: bool
    block: int
    elems: int
    ws: list[torch.Tensor]
    out: torch.Tensor
    bar: torch.Tensor
    launch: dict  # {"launch_pdl": True} on Hopper

    def per_phase(self, phases: int) -> int:
        per = self.elems // phases
        return per - per % (self.sms * self.block)


def streams() -> Streams:
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    pdl = torch.cuda.get_device_capability(dev)[0] >= 9
    block = 1024
    elems = MB * (1 << 20) // 2  # bf16
    elems -= elems % (sms * block * 8)
    s = Streams(sms, pdl, block, elems, [torch.randn(elems, device=dev, dtype=torch.bfloat16) for _ in range(LAYERS)],
                torch.empty(sms * block, device=dev, dtype=torch.float32), torch.zeros(64, dtype=torch.int32, device=dev),
                {"launch_pdl": True} if pdl else {})
    print(torch.cuda.get_device_name(dev), torch.__version__, triton.__version__,
          f"{sms} SMs, {elems * 2 / 1e6:.1f} MB a layer", flush=True)
    return s


def barrier_and_launch_graphs(s: Streams) -> dict[str, torch.cuda.CUDAGraph]:
    """For 1, 2, 3 and 5 phases: the phases in one launch with the kernel's barriers, and as separate launches."""
    graphs = {}
    for phases in (1, 2, 3, 5):
        per = s.per_phase(phases)

        def fused(phases=phases, per=per):
            for w in s.ws:
                _phases[(s.sms,)](w, s.out, s.bar, per, PHASES=phases, BLOCK=s.block, PDL=s.pdl, num_warps=4, **s.launch)

        def separate(phases=phases, per=per):
            for w in s.ws:
                for p in range(phases):
                    _phases[(s.sms,)](w[p * per:], s.out, s.bar, per, PHASES=1, BLOCK=s.block, PDL=s.pdl, num_warps=4,
                                      **s.launch)

        graphs[f"{phases} phases, {phases - 1} barriers"] = graph_of(fused)
        if phases > 1:
            graphs[f"{phases} phases, {phases} launches"] = graph_of(separate)
    return graphs


def time_graphs(graphs: dict[str, torch.cuda.CUDAGraph]) -> None:
    """Each graph's replay, median of 5 rounds taken in turns, printed per layer."""
    times: dict[str, list[float]] = {k: [] for k in graphs}
    for _ in range(5):
        for k, g in graphs.items():
            times[k].append(do_bench(g.replay, warmup=5, rep=40, return_mode="median"))
    for k, t in times.items():
        print(f"{k}: {1e3 * statistics.median(t) / LAYERS:.2f} us a layer", flush=True)


def main() -> None:
    time_graphs(barrier_and_launch_graphs(streams()))


if __name__ == "__main__":
    main()
