"""The concurrency table of a continuous-batching sweep: one row per job under the given folders (results.json), the
baseline (target-only) and the strategy side by side.   python experiments/continuous/table.py OUT [OUT ...]"""

import json
import sys
from pathlib import Path


def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"


def main(roots: list[str]) -> None:
    rows = []
    for root in roots:
        for path in sorted(Path(root).rglob("results.json")):
            r = json.loads(path.read_text())
            b, s, run = r["baseline"], r["strategy"], r["run"]
            rows.append((run["scheduler"], run["batch_size"], run["n_prompts"], b, s, r["speedup"] or {}))
    rows.sort(key=lambda x: (x[0], x[1]))
    print("| scheduler | in flight | requests | output tokens (none / spec) | TPOT ms p50 none / spec "
          "| ITL ms p50 none / spec | ITL ms p99 none / spec | whole-run tok/s none / spec | speedup TPOT (mean) "
          "| speedup whole-run tok/s |")
    print("|" + "---|" * 10)
    for sched, c, n, b, s, sp in rows:
        tps_b, tps_s = b["output_tokens_per_s_overall"], s["output_tokens_per_s_overall"]
        print(f"| {sched} | {c} | {n} | {b['output_tokens']} / {s['output_tokens']} "
              f"| {fmt(b['tpot_ms']['median'], 2)} / {fmt(s['tpot_ms']['median'], 2)} "
              f"| {fmt(b['itl_ms']['median'], 2)} / {fmt(s['itl_ms']['median'], 2)} "
              f"| {fmt(b['itl_ms'].get('p99'), 2)} / {fmt(s['itl_ms'].get('p99'), 2)} "
              f"| {fmt(tps_b, 0)} / {fmt(tps_s, 0)} | {fmt(sp.get('speedup'), 2)}x "
              f"| {fmt(tps_s / tps_b if tps_b and tps_s else None, 2)}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
