"""`python -m specbench` with models/decoder.py's LINEAR_WT_ROWS switch set first, to measure through the CLI what the
CPU's two fp32 product forms give (`weight @ x.T` for 2..8 rows against F.linear everywhere, the default).

    python experiments/cpu/cli_linear_rows.py 2,8 logger=none    # weight @ x.T for 2..8 rows
    python experiments/cpu/cli_linear_rows.py none logger=none   # F.linear (the default)

The first argument is the switch (lo,hi or none); the rest are the CLI's overrides. Everything else is the CLI's
own code path (Hydra, run(), the results table).
"""

from __future__ import annotations

import sys

import specbench.models.decoder as dec
from specbench.__main__ import main

if __name__ == "__main__":
    rows = sys.argv.pop(1)
    dec.LINEAR_WT_ROWS = None if rows == "none" else tuple(int(v) for v in rows.split(","))
    print(f"decoder.LINEAR_WT_ROWS = {dec.LINEAR_WT_ROWS}", flush=True)
    main()
