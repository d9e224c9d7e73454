"""The speed model's terms for jobs with an in-job baseline: speedup = AL / (r + k * c), where r = the strategy's verify
forward / the baseline's 1-token step and c = one draft pass / the baseline's 1-token step, read from results.json
(specbench.metrics.speed_terms; the CLI prints them under its table too).

    python experiments/cpu/terms.py outputs/<date>/<time>/results.json [more results.json ...]

"predicted" is AL / (r + k*c); "measured" the job's own speedup (baseline TPOT / strategy TPOT). They differ by
what the model leaves out: the commit and sampling between forwards, and per-prompt averaging.
"""

from __future__ import annotations

import json
import sys

from specbench.metrics import speed_terms


def terms(path: str) -> dict[str, float]:
    r = json.load(open(path))
    t = speed_terms(r)
    if t is None:
        raise SystemExit(f"{path}: no in-job baseline or no drafts; the speed model needs both")
    step = r["baseline"]["verify_ms_per_step"]
    k = t["draft_passes"]
    c = t["c"] if t["c"] is not None else 0.0
    return {"AL": r["strategy"]["acceptance_length"], "k": k, "r": t["r"], "c": c, "predicted": t["predicted"],
            "measured": r["speedup"]["speedup"], "baseline ms": step, "verify ms": r["strategy"]["verify_ms_per_step"],
            "draft pass ms": c * step}


def main() -> None:
    rows = [(p, terms(p)) for p in sys.argv[1:]]
    keys = list(rows[0][1])
    print("| results | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for p, t in rows:
        print(f"| {p} | " + " | ".join(f"{v:.2f}" for v in t.values()) + " |")


if __name__ == "__main__":
    main()
