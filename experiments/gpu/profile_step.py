"""Where a decode step's time goes through the CLI's own path: runs `python -m specbench <overrides>` in this process
and profiles (torch.profiler, CPU and CUDA) the timed batches of one side, then writes where the GPU sat idle.

    PROFILE_OUT=$OUT/prof PROFILE_SIDE=strategy PROFILE_BATCH=2 python3 experiments/gpu/profile_step.py <overrides>

PROFILE_SIDE: "strategy" (an engine whose proposer is not the target-only one) or "baseline"; PROFILE_BATCH: which of
that side's timed `Engine.generate` calls to profile (1 = its first; the warm-up's calls are not counted, since they
pass no progress callback). Writes into PROFILE_OUT:
- summary.txt: the profiled call's wall time, the GPU's busy time (the union of its kernels' intervals) and idle time,
  the idle gaps by the CPU op that was running when each began (its name, count, total us), and the engine's phase
  split of that batch (draft / verify / other seconds);
- ops.txt: torch.profiler's table by self CUDA time and by self CPU time;
- trace.json.gz: the Chrome trace (open in https://ui.perfetto.dev).
The job's results and the CLI's table are as without the profiler, except that the profiled batch is slower."""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from profile_report import run_module, write_report  # experiments/gpu/, this script's folder (first on sys.path)
from specbench import engine as engine_mod
from specbench.strategies.none import TargetOnly

OUT = Path(os.environ.get("PROFILE_OUT", "profile"))
SIDE = os.environ.get("PROFILE_SIDE", "strategy")
BATCH = int(os.environ.get("PROFILE_BATCH", "2"))
if SIDE not in ("strategy", "baseline"):
    raise SystemExit(f"PROFILE_SIDE must be strategy or baseline, got {SIDE!r}")

_seen = collections.Counter()
_generate = engine_mod.Engine.generate


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _side(engine) -> str:
    return "baseline" if isinstance(engine.proposer, TargetOnly) else "strategy"


def generate(self, prompts, on_step=None, **kw):
    if on_step is None:  # a warm-up call
        return _generate(self, prompts, on_step, **kw)
    side = _side(self)
    _seen[side] += 1
    if side != SIDE or _seen[side] != BATCH:
        return _generate(self, prompts, on_step, **kw)
    _sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = _generate(self, prompts, on_step, **kw)
        _sync()
    _report(prof, result[1], type(self.proposer).__name__)
    return result


def _report(prof, timing, proposer: str) -> None:
    header = [f"profiled: {SIDE} side ({proposer}), timed batch {BATCH}"]
    lines = write_report(prof, OUT, header, [f"engine's split of this batch: {timing}"])
    print("\n".join(lines[:4]), file=sys.stderr)


engine_mod.Engine.generate = generate
run_module("specbench", OUT, lambda: f"profile_step.py: nothing profiled: the {SIDE} side ran {_seen[SIDE]} timed "
                                    f"batches, PROFILE_BATCH is {BATCH}")
