"""A/B for a module-level switch of specbench.models.decoder (e.g. PACKED_FORM, AUTO_BUCKETS, or DRAFT_BF16_FORM with
`patches/draft-bf16-form.patch` applied): runs
`python -m specbench <overrides>` in this process with the switch set as given, so both sides of an A/B go through the
CLI's own code, warm-up and table.

    OMP_NUM_THREADS=2 python experiments/cpu/ab_switch.py DRAFT_BF16_FORM=False logger=none ...
"""

from __future__ import annotations

import ast
import runpy
import sys

import specbench.models.decoder as dec

if __name__ == "__main__":
    name, _, value = sys.argv[1].partition("=")
    if not hasattr(dec, name) or not value:
        raise SystemExit(f"first argument: NAME=VALUE for a switch of specbench.models.decoder, not {sys.argv[1]!r}")
    setattr(dec, name, ast.literal_eval(value))
    sys.argv = ["specbench", *sys.argv[2:]]
    runpy.run_module("specbench", run_name="__main__")
