"""Probe (H100/H200), measurement only: can a grid barrier cost less than `skinny_gemm._mlp_kernel`'s? Run 11 of
experiments/gpu/README.md found that barrier at 1.8-3.2 us against 0.5-0.9 us for a dependent launch's boundary. Its
wait loop has one thread per program poll the generation word between two `bar.sync` of the whole program, and its
arrive adds an exchange and a release after the last arrival. Two other barriers, the same streaming work as
`probe_barrier.py` (28 launches a graph, 6.5 MB a layer in 2, 3 or 5 phases), median of 5 alternating rounds:

- `poll`: the same sense-reversing barrier, but every thread polls the generation word with its own acquire load
  (PTX `ld.acquire.gpu`), so the wait loop has no `bar.sync`;
- `counter`: one monotonic 64-bit counter, never reset (2^63 arrivals do not wrap): a program's arrival returns the
  count before it, the barrier ends when the count reaches the next multiple of the program count, and every thread
  polls for that. There is no exchange and no generation word; the last arrival's own add is the release. Every
  kernel that shares the counter must launch the same number of programs, so the count stays a multiple of it.

    python3 experiments/gpu/probe_barrier_kinds.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from probe_barrier import barrier_and_launch_graphs, graph_of, streams, time_graphs


@triton.jit
def _ld_acquire(ptr):
    """One acquire load at GPU scope by each thread (not hoisted out of a loop: the asm is not pure)."""
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b64 $0, [$1];", "=l,l", [ptr], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _ld_acquire32(ptr):
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _phases_kind(w_ptr, out_ptr, bar_ptr, ctr_ptr, per_phase, PHASES: tl.constexpr, BLOCK: tl.constexpr,
                 PDL: tl.constexpr, KIND: tl.constexpr):
    """`probe_barrier._phases` with another barrier: KIND 1 = poll, 2 = counter (see the module docstring)."""
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
            tl.debug_barrier()  # the whole program's work is done before its arrival is seen
            if KIND == 1:
                gen = _ld_acquire32(bar_ptr + 32)
                arrived = tl.atomic_add(bar_ptr, 1, sem="acq_rel", scope="gpu")
                if arrived == nprog - 1:
                    tl.atomic_xchg(bar_ptr, 0, sem="relaxed", scope="gpu")
                    tl.atomic_add(bar_ptr + 32, 1, sem="release", scope="gpu")
                else:
                    now = _ld_acquire32(bar_ptr + 32)
                    while now == gen:
                        now = _ld_acquire32(bar_ptr + 32)
            else:
                before = tl.atomic_add(ctr_ptr, 1, sem="acq_rel", scope="gpu")
                target = (before // nprog + 1) * nprog
                now = _ld_acquire(ctr_ptr)
                while now < target:
                    now = _ld_acquire(ctr_ptr)
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


def main() -> None:
    s = streams()
    ctr = torch.zeros(16, dtype=torch.int64, device=s.out.device)
    graphs = barrier_and_launch_graphs(s)
    for phases in (2, 3, 5):
        per = s.per_phase(phases)
        for kind, name in ((1, "poll"), (2, "counter")):
            def other(phases=phases, per=per, kind=kind):
                for w in s.ws:
                    _phases_kind[(s.sms,)](w, s.out, s.bar, ctr, per, PHASES=phases, BLOCK=s.block, PDL=s.pdl,
                                           KIND=kind, num_warps=4, **s.launch)
            graphs[f"{phases} phases, {phases - 1} {name} barriers"] = graph_of(other)
    time_graphs(graphs)


if __name__ == "__main__":
    main()
