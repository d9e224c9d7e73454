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

import atexit
import collections
import gzip
import os
import runpy
import shutil
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

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
    OUT.mkdir(parents=True, exist_ok=True)
    events = prof.events()
    kernels = sorted((e.time_range.start, e.time_range.end) for e in events
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start)
    cpu_ops = sorted(((e.time_range.start, e.time_range.end, e.name) for e in events
                      if e.device_type == torch.autograd.DeviceType.CPU), key=lambda x: x[0])
    busy, gaps, cur_s, cur_e = 0.0, [], None, None
    for s, e in kernels:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
                gaps.append((cur_e, s))
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    span = (kernels[-1][1] - kernels[0][0]) if kernels else 0.0
    by_op: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for gs, ge in gaps:  # the innermost CPU op running when the gap began (the host work the GPU waited on)
        inner = None
        for s, e, name in cpu_ops:
            if s > gs:
                break
            if e >= gs and (inner is None or s >= inner[0]):
                inner = (s, e, name)
        key = inner[2] if inner else "(no CPU op)"
        by_op[key][0] += 1
        by_op[key][1] += ge - gs
    lines = [f"profiled: {SIDE} side ({proposer}), timed batch {BATCH}",
             f"kernels: {len(kernels)}; first kernel to last: {span / 1e3:.2f} ms; GPU busy {busy / 1e3:.2f} ms "
             f"({100 * busy / span if span else 0:.1f}%), idle {(span - busy) / 1e3:.2f} ms in {len(gaps)} gaps",
             f"gaps over 20 us: {sum(1 for s, e in gaps if e - s > 20)}, their total {sum(e - s for s, e in gaps if e - s > 20) / 1e3:.2f} ms",
             f"engine's split of this batch: {timing}", "", "idle gaps by the CPU op running when each began:",
             f"{'op':70} {'gaps':>6} {'total us':>10} {'mean us':>9}"]
    for name, (n, tot) in sorted(by_op.items(), key=lambda kv: -kv[1][1])[:40]:
        lines.append(f"{name[:70]:70} {n:6d} {tot:10.0f} {tot / n:9.1f}")
    (OUT / "summary.txt").write_text("\n".join(lines) + "\n")
    ka = prof.key_averages()
    (OUT / "ops.txt").write_text(ka.table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=70)
                                 + "\n\n" + ka.table(sort_by="self_cpu_time_total", row_limit=40,
                                                     max_name_column_width=70))
    trace = OUT / "trace.json"
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    print("\n".join(lines[:4]), file=sys.stderr)


def _said_nothing() -> None:
    if not (OUT / "summary.txt").exists():
        print(f"profile_step.py: nothing profiled: the {SIDE} side ran {_seen[SIDE]} timed batches, PROFILE_BATCH is "
              f"{BATCH}", file=sys.stderr)


atexit.register(_said_nothing)
engine_mod.Engine.generate = generate
sys.argv = ["specbench", *sys.argv[1:]]
runpy.run_module("specbench", run_name="__main__", alter_sys=True)
