"""The report of a torch.profiler run that profile_step.py (a decode batch) and experiments/drafters/profile_train.py
(training steps) write: where the GPU sat idle, and by which host operation; torch.profiler's tables; the trace."""

from __future__ import annotations

import atexit
import collections
import gzip
import runpy
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch


def write_report(prof, out: Path, header: list[str], notes: list[str]) -> list[str]:
    """Writes into `out`: summary.txt (`header`, the kernels' count, the GPU's busy and idle time between the first
    kernel and the last, the idle gaps by the innermost CPU op running when each began, then `notes`), ops.txt
    (torch.profiler's tables by self CUDA and by self CPU time) and trace.json.gz. Returns summary.txt's lines."""
    out.mkdir(parents=True, exist_ok=True)
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
    lines = [*header,
             f"kernels: {len(kernels)}; first kernel to last: {span / 1e3:.2f} ms; GPU busy {busy / 1e3:.2f} ms "
             f"({100 * busy / span if span else 0:.1f}%), idle {(span - busy) / 1e3:.2f} ms in {len(gaps)} gaps",
             f"gaps over 20 us: {sum(1 for s, e in gaps if e - s > 20)}, their total "
             f"{sum(e - s for s, e in gaps if e - s > 20) / 1e3:.2f} ms",
             *notes, "", "idle gaps by the CPU op running when each began:",
             f"{'op':70} {'gaps':>6} {'total us':>10} {'mean us':>9}"]
    for name, (n, tot) in sorted(by_op.items(), key=lambda kv: -kv[1][1])[:40]:
        lines.append(f"{name[:70]:70} {n:6d} {tot:10.0f} {tot / n:9.1f}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    ka = prof.key_averages()
    (out / "ops.txt").write_text(ka.table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=70)
                                 + "\n\n" + ka.table(sort_by="self_cpu_time_total", row_limit=40,
                                                     max_name_column_width=70))
    trace = out / "trace.json"
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    return lines


def run_module(module: str, out: Path, nothing: Callable[[], str]) -> None:
    """Runs `python -m <module> <this script's arguments>` in this process (with whatever the caller patched); at
    exit, when out/summary.txt was not written, prints `nothing()` (why no profile was taken)."""
    def said_nothing() -> None:
        if not (out / "summary.txt").exists():
            print(nothing(), file=sys.stderr)

    atexit.register(said_nothing)
    sys.argv = [module, *sys.argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
