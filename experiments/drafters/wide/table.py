"""Both heads of the wide run side by side, from the sweeps' results.json (cpu_al.sh's, or the H100's).

    python experiments/drafters/wide/table.py experiments/drafters/wide/cpu-al
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(root: str) -> None:
    for sweep in sorted(Path(root).iterdir()):
        for job in sorted(sweep.glob("*/results.json"), key=lambda p: int(p.parent.name)):
            r = json.loads(job.read_text())
            s, c = r["strategy"], r["config"]
            # these sweeps ran before the wide head was shipped: the name and /tmp/old-head were the head before it
            head = "previous" if c["strategy"]["checkpoint"] in ("eagle-smollm2-135m", "/tmp/old-head") else "wide"
            pos = " ".join(f"{a:.2f}" for a in s["per_position_acceptance"])
            cats = " ".join(f"{k} {v['strategy']['acceptance_length']:.2f}"
                            for k, v in sorted((r.get("by_category") or {}).items()))
            print(f"{sweep.name} {c['dataset']['name']} T={c['sampling']['temperature']} {head}: "
                  f"AL {s['acceptance_length']:.3f} | {pos} | {cats}")


if __name__ == "__main__":
    main(sys.argv[1])
