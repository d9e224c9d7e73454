"""The AL / mean K table of experiments/adaptive/runs (al.sh) or of speed runs (speed.sh): one markdown row per job."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(root: Path):
    for path in sorted(root.glob("*/results.json")):
        r = json.loads(path.read_text())
        s, cfg = r["strategy"], r["config"]["strategy"]
        schedule = cfg.get("k_schedule", "fixed")
        if schedule == "confidence":
            schedule += f" t={cfg['confidence_threshold']}"
        sp = (r.get("speedup") or {}).get("speedup")
        yield (r["config"]["dataset"]["name"], cfg["name"], schedule, cfg["k"], r["config"]["engine"]["batch_size"],
               f"{s['mean_k']:.2f}", f"{s['acceptance_length']:.3f}", " ".join(map(str, s["accepted_histogram"])),
               f"{s['draft_forwards_per_step']:.2f}" if s.get("draft_forwards_per_step") is not None else "-",
               "-" if sp is None else f"{sp:.2f}")


def main(root: str) -> None:
    header = ("dataset", "strategy", "k_schedule", "k (max)", "batch", "mean K", "AL", "steps accepting 0..k",
              "draft fwd / step", "speedup")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in sorted(rows(Path(root)), key=lambda r: (r[0], r[1], r[2] != "fixed", r[2], r[3])):
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "runs"))
