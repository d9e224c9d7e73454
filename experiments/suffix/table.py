"""Prints the markdown tables of experiments/suffix/README.md from outputs/suffix/<dataset>-<strategy>/results.json."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path("outputs/suffix")
DATASETS = ("humaneval", "spec-bench", "mt-bench", "repeat")
STRATEGIES = ("suffix", "suffix-fill", "suffix-tree", "ngram")


def load(data: str, strategy: str) -> dict | None:
    path = ROOT / f"{data}-{strategy}" / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def cell(summary: dict | None) -> str:
    if summary is None:
        return "-"
    return f"{summary['acceptance_length']:.2f} ({summary['al_per_verified_token']:.2f})"


print("| workload (prompts) | " + " | ".join(STRATEGIES) + " |")
print("|---|" + "---|" * len(STRATEGIES))
for data in DATASETS:
    results = {s: load(data, s) for s in STRATEGIES}
    n = next((r["run"]["n_prompts"] for r in results.values() if r), "?")
    print(f"| {data} ({n}) | " + " | ".join(cell(r and r["strategy"]) for r in results.values()) + " |")
for data in ("spec-bench", "repeat"):
    results = {s: load(data, s) for s in STRATEGIES}
    cats = next((list(r["by_category"]) for r in results.values() if r), [])
    print(f"\n{data}, per category:\n")
    print("| category | " + " | ".join(STRATEGIES) + " |")
    print("|---|" + "---|" * len(STRATEGIES))
    for c in cats:
        print(f"| {c} | " + " | ".join(cell(r and r["by_category"][c]["strategy"]) for r in results.values()) + " |")
