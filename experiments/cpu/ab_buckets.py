"""A/B for the CPU product forms of 9-64 rows (decoder.AUTO_BUCKETS): runs `python -m specbench <overrides>` in this
process with the buckets on ("after", the package default) or off ("before": 9 rows and more take F.linear, as until
2026-12-04), so both sides go through the CLI's own code, warm-up and table.

    OMP_NUM_THREADS=2 python experiments/cpu/ab_buckets.py before|after logger=none strategy.num_nodes=8 ...
"""

from __future__ import annotations

import runpy
import sys

import specbench.models.decoder as dec

if __name__ == "__main__":
    side, overrides = sys.argv[1], sys.argv[2:]
    if side not in ("before", "after"):
        raise SystemExit(f"first argument: before or after, not {side!r}")
    if side == "before":
        dec.AUTO_BUCKETS = ()
    sys.argv = ["specbench", *overrides]
    runpy.run_module("specbench", run_name="__main__")
