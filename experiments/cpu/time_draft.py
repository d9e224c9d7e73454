"""Where a draft pass of the CPU default goes: the default job (SmolLM2-135M bf16 + the shipped EAGLE head, k=3,
first 4 MT-Bench prompts, no baseline) with the head's forward and logits, the proposer's draft_forward and
_propose timed per call by wrapping them (host clock; the CPU runs synchronously).

    OMP_NUM_THREADS=2 python experiments/cpu/time_draft.py [OUTPUT_DIR [OVERRIDE ...]]

(overrides as on the CLI, e.g. strategy.cpu_half_weights=false)

Measured 2026-12-02 (experiments/cpu/README.md): draft_forward 5.10 ms a call on main (9d8f229), 3.78 ms on branch
wip/next-suite (the head's linears packed for oneDNN); head logits 2.21 and 1.05 ms. This file, run on main at
fd95ad5: draft_forward 5.21 ms, head logits 2.37 ms.
"""

from __future__ import annotations

import collections
import sys
import time

from hydra import compose, initialize_config_dir

import specbench.strategies.base as base
import specbench.strategies.eagle as eagle
from specbench.run import CONF_DIR, run

TOTAL: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()


def timed(owner: type, name: str, label: str) -> None:
    inner = getattr(owner, name)

    def call(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            TOTAL[label] += time.perf_counter() - t0
            CALLS[label] += 1

    setattr(owner, name, call)


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/time_draft"
    timed(eagle.EagleHead, "forward", "head.forward")
    timed(eagle.EagleHead, "logits", "head.logits")
    timed(eagle.EagleProposer, "draft_forward", "draft_forward")
    timed(base.Proposer, "_propose", "_propose")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["logger=none", "baseline=false", "dataset.num_prompts=4",
                                                       f"output_dir={out}", *sys.argv[2:]])
    run(cfg)
    for label, total in TOTAL.items():
        per_call = total / CALLS[label] * 1e3
        print(f"{label:15s} n={CALLS[label]:5d} total {total * 1e3:8.1f} ms  per call {per_call:6.2f} ms")


if __name__ == "__main__":
    main()
