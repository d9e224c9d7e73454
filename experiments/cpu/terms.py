"""The speed model's terms for jobs with an in-job baseline: speedup = AL / (r + k * c), where r = the strategy's verify
forward / the baseline's 1-token step and c = one draft pass / the baseline's 1-token step, read from results.json.

    python experiments/cpu/terms.py outputs/<date>/<time>/results.json [more results.json ...]

"predicted" is AL / (r + k*c); "measured" the job's own speedup (baseline TPOT / strategy TPOT). They differ by
what the model leaves out: the commit and sampling between forwards, and per-prompt averaging.
"""

from __future__ import annotations

import json
import sys


def terms(path: str) -> dict[str, float]:
    r = json.load(open(path))
    base, strat = r["baseline"], r["strategy"]
    step = base["verify_ms_per_step"]  # target-only decoding: one 1-token forward per step
    split = strat["time_split"]
    k = strat["draft_forwards_per_step"]
    draft_pass = split["draft_s"] * 1e3 / split["steps"] / k if k else 0.0
    al = strat["acceptance_length"]
    rr, c = strat["verify_ms_per_step"] / step, draft_pass / step
    return {"AL": al, "k": k, "r": rr, "c": c, "predicted": al / (rr + k * c), "measured": r["speedup"]["speedup"],
            "baseline ms": step, "verify ms": strat["verify_ms_per_step"], "draft pass ms": draft_pass}


def main() -> None:
    rows = [(p, terms(p)) for p in sys.argv[1:]]
    keys = list(rows[0][1])
    print("| results | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for p, t in rows:
        print(f"| {p} | " + " | ".join(f"{v:.2f}" for v in t.values()) + " |")


if __name__ == "__main__":
    main()
