"""Issue 14's k = 1..5 table from a `specbench.report` CSV: one row per (dataset, strategy, T), one column per k,
each cell "AL / mean K drafted / speedup" (T=0 cells also say how many prompts were identical to target-only
decoding when not all were).

    python -m specbench.report <sweep dirs> --out <dir>      # writes <dir>/report.csv
    python experiments/frontier/table.py <dir>/report.csv    # prints the markdown table
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict


def _label(row: dict[str, str]) -> str:
    settings = dict(kv.split("=", 1) for kv in row["settings"].split() if "=" in kv)
    tree = settings.get("tree", "chain")
    if tree == "chain":
        return row["strategy"]
    return f"{row['strategy']} {tree} tree ({settings.get('num_nodes')} nodes)"


def main(path: str) -> None:
    cells: dict[tuple[str, str, str], dict[int, str]] = defaultdict(dict)
    ks: set[int] = set()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            k = int(row["k"])
            key = (row["dataset"], _label(row), f"{float(row['temperature']):g}")
            cell = f"{float(row['acceptance_length']):.2f} / {float(row['mean_k']):.2f} / {float(row['speedup']):.2f}x"
            match = row.get("exact_match") or "-"
            if match != "-" and match.split("/")[0] != match.split("/")[1]:
                cell += f" ({match} identical)"
            if k in cells[key]:
                raise SystemExit(f"two jobs for {key} at k={k} in {path}; give one sweep per cell")
            cells[key][k] = cell
            ks.add(k)
    order = sorted(ks)
    print("| dataset | strategy | T | " + " | ".join(f"k={k}" for k in order) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in order) + " |")
    for key in sorted(cells):
        print("| " + " | ".join(key) + " | " + " | ".join(cells[key].get(k, "") for k in order) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
