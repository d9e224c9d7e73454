"""Whole-run output tok/s against requests in flight, from concurrency tables (table.py's markdown), target-only and
speculative side by side; static batches as separate markers. Left: tok/s (log-log); right: speculative over
target-only, the line where speculation stops paying.

    python experiments/continuous/plot.py experiments/continuous/run3/table.md:"run 3 (4d1c5fb)" \
        experiments/continuous/run2/table.md:"run 2 (629b672)" experiments/continuous/run1/table.md:"run 1" \
        --out experiments/continuous/plot.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(table: Path) -> list[tuple[str, int, float, float]]:
    """(scheduler, in flight, target-only tok/s, speculative tok/s) per row of a table.py table."""
    rows = []
    for line in table.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 8 or cells[0] not in ("continuous", "static"):
            continue
        none, spec = (float(v) for v in cells[7].split("/"))
        rows.append((cells[0], int(cells[1]), none, spec))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tables", nargs="+", help="table.md[:label]")
    ap.add_argument("--out", default="plot.png")
    args = ap.parse_args()
    fig, (ax, ratio) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, spec_arg in enumerate(args.tables):
        path, _, label = spec_arg.partition(":")
        rows = read(Path(path))
        style = ("-", "--", ":", "-.")[i % 4]  # the first table solid, older runs fainter styles
        cont = sorted(r for r in rows if r[0] == "continuous")
        xs = [r[1] for r in cont]
        ax.plot(xs, [r[2] for r in cont], style, marker="o", color="tab:blue", label=f"{label}: target-only")
        ax.plot(xs, [r[3] for r in cont], style, marker="o", color="tab:orange", label=f"{label}: speculative")
        ratio.plot(xs, [r[3] / r[2] for r in cont], style, marker="o", color="tab:green",
                   label=f"{label}: continuous")
        stat = sorted(r for r in rows if r[0] == "static")
        if stat:
            alpha = 0.5 if i else 1.0
            ax.scatter([r[1] for r in stat], [r[2] for r in stat], marker="s", color="tab:blue", alpha=alpha,
                       label=f"{label}: static batch, target-only")
            ax.scatter([r[1] for r in stat], [r[3] for r in stat], marker="s", color="tab:orange", alpha=alpha,
                       label=f"{label}: static batch, speculative")
            ratio.scatter([r[1] for r in stat], [r[3] / r[2] for r in stat], marker="s", color="tab:green",
                          alpha=alpha, label=f"{label}: static batch")
    for a in (ax, ratio):
        a.set_xscale("log", base=2)
        a.set_xlabel("requests in flight (slots)")
        a.grid(True, which="both", alpha=0.3)
    ax.set_yscale("log")
    ax.set_ylabel("whole-run output tok/s")
    ax.legend(fontsize=7)
    ratio.axhline(1.0, color="grey", lw=1)
    ratio.set_ylabel("speculative / target-only (whole-run tok/s)")
    ratio.legend(fontsize=7)
    fig.suptitle("Continuous batching on the H200: Qwen3-8B + 0.6B draft, synthetic AL 2.8, k=3, T=1, 256 requests")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(args.out)


if __name__ == "__main__":
    main()
