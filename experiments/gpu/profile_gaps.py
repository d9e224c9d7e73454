"""Reads profile_step.py's trace.json.gz and prints a decode step's shape: the GPU's bursts of back-to-back kernels
(gaps under 15 us), the step period (from one burst of over 500 kernels to the next), the draft passes and the verify
inside a step (split at the gaps over 2 us), and the host's ops from the end of one step's GPU work to the start of
the next (what the GPU waits on).
    python3 experiments/gpu/profile_gaps.py <trace.json.gz> [step index, default 10]"""

from __future__ import annotations

import gzip
import json
import statistics
import sys

trace = json.load(gzip.open(sys.argv[1]))
pick = int(sys.argv[2]) if len(sys.argv) > 2 else 10
events = trace["traceEvents"]
kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
host = sorted((e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime")), key=lambda e: e["ts"])
t0 = kernels[0]["ts"]
end = lambda e: e["ts"] + e["dur"]  # noqa: E731

bursts, cur = [], [kernels[0]]
for e in kernels[1:]:
    if e["ts"] - max(end(x) for x in cur[-3:]) > 15:
        bursts.append(cur)
        cur = []
    cur.append(e)
bursts.append(cur)
steps = [b for b in bursts if len(b) > 500]
span = lambda b: (end(b[-1]) - b[0]["ts"]) / 1e3  # noqa: E731
starts = [b[0]["ts"] for b in steps]
print(f"kernels {len(kernels)}, their sum {sum(e['dur'] for e in kernels) / 1e3:.2f} ms over "
      f"{(end(kernels[-1]) - t0) / 1e3:.2f} ms; steps (bursts of > 500 kernels): {len(steps)}")
print(f"a step's GPU burst: median {statistics.median(span(b) for b in steps):.3f} ms "
      f"({statistics.median(len(b) for b in steps):.0f} kernels); step period: median "
      f"{statistics.median((b - a) / 1e3 for a, b in zip(starts, starts[1:])):.3f} ms")

b = steps[pick]
parts, last, first = [], b[0]["ts"], b[0]["ts"]
for e in b[1:]:
    if e["ts"] - last > 2:
        parts.append((first, last))
        first = e["ts"]
    last = max(last, end(e))
parts.append((first, last))
print(f"step {pick}: GPU segments split at gaps > 2 us (ms from the burst's start, length; for a segment over 0.5 ms, "
      "its kernels' time by name, us, and count):")
for s, e in parts:
    print(f"  {(s - b[0]['ts']) / 1e3:7.3f}  {(e - s) / 1e3:7.3f}")
    if e - s > 500:
        by_name: dict[str, list[float]] = {}
        for x in b:
            if s <= x["ts"] < e:
                by_name.setdefault(x["name"][:40], [0.0, 0])[0] += x["dur"]
                by_name[x["name"][:40]][1] += 1
        for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"            {name:40} {us:8.1f} {n:4d}")
nxt = steps[pick + 1][0]["ts"]
print(f"host ops from step {pick}'s last kernel to step {pick + 1}'s first ({(nxt - end(b[-1])) / 1e3:.3f} ms idle; "
      "us from that last kernel, duration us):")
for e in host:
    if end(b[-1]) - 60 <= e["ts"] <= nxt:
        print(f"  {e['ts'] - end(b[-1]):8.1f} {e.get('dur', 0):7.1f}  {e['name'][:70]}")
