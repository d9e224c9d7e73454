"""Where a training step's time goes through the trainer's own path: runs `python -m specbench.train <overrides>` in
this process and profiles (torch.profiler, CPU and CUDA) PROFILE_STEPS steps from step PROFILE_FROM of the run
(default 5 steps from the 10th: past the first steps' allocations and kernel choices), then lets the run go on.

    PROFILE_OUT=$OUT/prof-train PROFILE_FROM=10 PROFILE_STEPS=5 python3 experiments/drafters/profile_train.py <overrides>

Writes into PROFILE_OUT, as experiments/gpu/profile_step.py does for a decode batch: summary.txt (the profiled steps'
wall time, the GPU's busy and idle time, the idle gaps by the host op running when each began, and how many times
the host waited for the device), ops.txt (torch.profiler's tables by self CUDA and self CPU time) and
trace.json.gz. A step is counted where the trainer asks for its batch (specbench.train.loop.Batches), so the
profiled span is whole steps. On a CPU it profiles the CPU alone (no idle-gap analysis)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from profile_report import run_module, write_report  # noqa: E402 - experiments/gpu/profile_report.py

from specbench.train import loop  # noqa: E402

OUT = Path(os.environ.get("PROFILE_OUT", "profile-train"))
FROM = int(os.environ.get("PROFILE_FROM", "10"))
STEPS = int(os.environ.get("PROFILE_STEPS", "5"))
if FROM < 0 or STEPS < 1:
    raise SystemExit(f"PROFILE_FROM must be >= 0 and PROFILE_STEPS >= 1, got {FROM} and {STEPS}")

_state: dict[str, object] = {"calls": 0}
_call = loop.Batches.__call__
_CUDA = torch.cuda.is_available()
# what makes the host wait: a value read back (item, float()), a boolean index's size (nonzero), an explicit sync
_WAITS = ("aten::item", "aten::nonzero", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _sync() -> None:
    if _CUDA:
        torch.cuda.synchronize()


def batches_call(self, step: int):
    calls = _state["calls"] = int(_state["calls"]) + 1
    if calls == FROM + 1:  # the FROM-th step of this process is over: start
        _sync()
        prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if _CUDA else []))
        prof.start()
        _state.update(prof=prof, t0=time.perf_counter(), step0=step)
    elif calls == FROM + STEPS + 1 and "prof" in _state:  # STEPS steps later: stop and report
        _sync()
        wall = time.perf_counter() - float(_state["t0"])
        prof = _state.pop("prof")
        prof.stop()
        _report(prof, wall, int(_state["step0"]), step)
    return _call(self, step)


def _report(prof, wall: float, first: int, end: int) -> None:
    n = end - first
    counts: dict[str, int] = {}
    for e in prof.events():
        for name in _WAITS:
            if e.name == name:
                counts[name] = counts.get(name, 0) + 1
    header = [f"profiled: training steps {first}..{end - 1} ({n} steps) of `python -m specbench.train "
              f"{' '.join(sys.argv[1:])}`",
              f"wall time: {wall * 1e3:.1f} ms, {wall * 1e3 / n:.1f} ms a step (the profiler's own cost included)"]
    notes = ["host waits on the device or reads back a value, a step: "
             + (", ".join(f"{k} {v / n:.1f}" for k, v in sorted(counts.items())) or "none seen")]
    lines = write_report(prof, OUT, header, notes)
    print("\n".join(lines[:5]), file=sys.stderr)


loop.Batches.__call__ = batches_call
run_module("specbench.train", OUT, lambda: f"profile_train.py: nothing profiled: the run took {_state['calls']} "
                                          f"steps, PROFILE_FROM + PROFILE_STEPS is {FROM + STEPS}")
