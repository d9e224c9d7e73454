"""The AL table of experiments/cross_tokenizer/README.md from the runs' results.json files.

    python experiments/cross_tokenizer/summarize.py experiments/cross_tokenizer/results/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(paths: list[str]) -> None:
    print("| target | draft | rule | T | prompts | n | K | AL | acceptance rate | per-position acc. | identical to target-only |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        r = json.loads(Path(path).read_text())
        run, s, em = r["run"], r["strategy"], r["exact_match"]
        mode = r["config"]["strategy"].get("cross_tokenizer", "auto")
        rule = ("uad" if run["temperature"] == 0 else "tli") if mode == "auto" else mode
        same = f"{em['equal']}/{em['n']}" if em else "- (T > 0)"
        pos = " ".join(f"{a:.2f}" for a in s["per_position_acceptance"])
        print(f"| {run['target']} | {run['draft']} | {rule} | {run['temperature']:g} | {run['dataset']} | {run['n_prompts']} | "
              f"{r['config']['strategy']['k']} | {s['acceptance_length']:.2f} | {s['acceptance_rate']:.3f} | {pos} | "
              f"{same} |")


if __name__ == "__main__":
    main(sys.argv[1:])
