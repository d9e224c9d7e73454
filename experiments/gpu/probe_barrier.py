"""Probe (H100/H200), measurement only: what a grid barrier costs next to a kernel boundary, to size the next fusion
(run 10 of experiments/gpu/README.md: the MLP in one launch saved 1.9 us a layer on the H200, two boundaries
for one barrier). Every launch streams 8 MB of weights (one 0.6B-sized GEMM's worth, split over the programs) in
B + 1 phases separated by B grid barriers: `skinny_gemm._mlp_kernel`'s own (`_grid_arrive`, `_grid_wait`) with its
two ways of waiting, and a third kind (KINDS). The same work as B + 1 separate launches (dependent launch on Hopper,
as the decoder's GEMMs) is the comparison. 28 launches a graph (one per
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
# the barriers timed: the kernel's as it was until 2026-12-05 (one thread per program polls with an atomic add of 0,
# between two bar.sync of the program), the kernel's with every thread polling by its own ld.acquire (`_grid_wait`'s
# POLL), and a monotonic 64-bit counter never reset (a program's arrival returns the count before it; the barrier
# ends when the count reaches the next multiple of the program count; no exchange, no generation word; every launch
# that shares it must have the same program count)
KINDS = ("atomic-poll", "load-poll", "counter")


@triton.jit
def _ld_acquire64(ptr):
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b64 $0, [$1];", "=l,l", [ptr], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _phases(w_ptr, out_ptr, bar_ptr, ctr_ptr, per_phase, PHASES: tl.constexpr, BLOCK: tl.constexpr,
            PDL: tl.constexpr, KIND: tl.constexpr):
    """PHASES phases, each summing this program's share of one slice of w, with a grid barrier between phases: KIND 0
    and 1 are `skinny_gemm._mlp_kernel`'s (`_grid_wait` with POLL off and on), 2 the monotonic counter (see KINDS)."""
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
        if p < PHASES - 1:
            if KIND == 2:
                tl.debug_barrier()  # the whole program's work is done before its arrival is seen
                before = tl.atomic_add(ctr_ptr, 1, sem="acq_rel", scope="gpu")
                target = (before // nprog + 1) * nprog
                now = _ld_acquire64(ctr_ptr)
                while now < target:
                    now = _ld_acquire64(ctr_ptr)
            else:
                gen, arrived = _grid_arrive(bar_ptr)
                _grid_wait(bar_ptr, gen, arrived, nprog, KIND == 1)
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
    ctr: torch.Tensor  # the counter barrier's int64 word
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
                torch.zeros(16, dtype=torch.int64, device=dev), {"launch_pdl": True} if pdl else {})
    print(torch.cuda.get_device_name(dev), torch.__version__, triton.__version__,
          f"{sms} SMs, {elems * 2 / 1e6:.1f} MB a layer", flush=True)
    return s


def barrier_and_launch_graphs(s: Streams) -> dict[str, torch.cuda.CUDAGraph]:
    """For 1, 2, 3 and 5 phases: the phases in one launch with each of KINDS' barriers, and as separate launches."""
    graphs = {}
    for phases in (1, 2, 3, 5):
        per = s.per_phase(phases)

        def launch(phases, per, kind, split):
            for w in s.ws:
                for p in range(phases if split else 1):
                    _phases[(s.sms,)](w[p * per:], s.out, s.bar, s.ctr, per, PHASES=1 if split else phases,
                                      BLOCK=s.block, PDL=s.pdl, KIND=kind, num_warps=4, **s.launch)

        for kind, name in enumerate(KINDS if phases > 1 else KINDS[:1]):
            label = f"{phases} phases, {phases - 1} {name} barriers" if phases > 1 else "1 phase"
            graphs[label] = graph_of(lambda a=(phases, per, kind, False): launch(*a))
        if phases > 1:
            graphs[f"{phases} phases, {phases} launches"] = graph_of(lambda a=(phases, per, 0, True): launch(*a))
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
