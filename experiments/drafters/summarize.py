"""The drafter table of experiments/drafters/README.md, from specbench.report's report.csv.

    python experiments/drafters/summarize.py experiments/drafters/table/report.csv > experiments/drafters/table/summary.md

One block per (dataset, temperature): acceptance length at k = 1..5 for every drafter, then the
exact-match count of the T = 0 jobs against target-only decoding (the `none` jobs).
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict

NAMES = {"eagle": "eagle (trained head)", "medusa": "medusa (5 trained heads)",
         "draft_model": "draft_model (4-layer draft, distilled)", "ngram": "ngram (prompt lookup, n = 1..3)"}
ORDER = ["eagle (trained head)", "medusa (5 trained heads)", "draft_model (4-layer draft, distilled)",
         "layer_skip L=4 (the same 4 layers, untrained)", "layer_skip L=15", "ngram (prompt lookup, n = 1..3)"]
DATASETS = {"mt-bench": "MT-Bench (all 80 first turns)", "humaneval": "HumanEval (all 164)"}


def drafter(row: dict[str, str]) -> str:
    if row["strategy"] == "layer_skip":
        layers = row["settings"].split("=")[1]
        return f"layer_skip L={layers}" + (" (the same 4 layers, untrained)" if layers == "4" else "")
    return NAMES.get(row["strategy"], row["strategy"])


def main(path: str) -> None:
    rows = [r for r in csv.DictReader(open(path)) if r["strategy"] != "none"]
    al: dict[tuple[str, float, str], dict[int, float]] = defaultdict(dict)
    matches: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        al[(r["dataset"], float(r["temperature"]), drafter(r))][int(r["k"])] = float(r["acceptance_length"])
        if r["exact_match"]:
            matches[r["dataset"]].append(r["exact_match"].split()[0])
    for dataset, title in DATASETS.items():
        for temperature in (0.0, 1.0):
            print(f"\n**{title}, T = {temperature:g}**: acceptance length at k = 1..5\n")
            print("| drafter | k=1 | k=2 | k=3 | k=4 | k=5 |\n|---|---|---|---|---|---|")
            for name in ORDER:
                by_k = al.get((dataset, temperature, name), {})
                print(f"| {name} | " + " | ".join(f"{by_k[k]:.2f}" if k in by_k else "-" for k in range(1, 6)) + " |")
        got = matches.get(dataset, [])
        equal = sum(m.split("/")[0] == m.split("/")[1] for m in got)
        print(f"\nT = 0 output identical to target-only decoding on every prompt in {equal} of {len(got)} jobs "
              f"({', '.join(sorted(set(got)))}).")


if __name__ == "__main__":
    main(sys.argv[1])
