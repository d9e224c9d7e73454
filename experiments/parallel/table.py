"""Markdown AL table of the sweeps in experiments/parallel/README.md: python experiments/parallel/table.py DIR..."""

from __future__ import annotations

import json
import sys
from pathlib import Path

for sweep in sys.argv[1:]:
    rows = []
    for f in sorted(Path(sweep).glob("*/results.json")):
        r = json.loads(f.read_text())
        s, k = r["strategy"], r["config"]["strategy"]["k"]
        rows.append((k, s["acceptance_length"], s["per_position_acceptance"], s["draft_forwards_per_step"], s["n_prompts"]))
    for k, al, per, fwd, n in sorted(rows):
        print(f"| {Path(sweep).name} | {k} | {al:.3f} | {' / '.join(f'{p:.2f}' for p in per)} | {fwd:.2f} | {n} |")
