"""The row product (a cpu_rows.c source) built for this CPU (-march=native) and for AVX2 alone (-march=haswell: 16
vector registers, no AVX-512, as on an AVX2-only CPU), timed over SmolLM2-135M's products in forward order (121
weights, 538 MB, streaming from memory) beside F.linear, for 1-8 rows; medians of ROUNDS passes after one untimed,
alternating, in ms a pass; and whether every build gives the same bits at 6 rows. Each source given is built both
ways into a temporary directory, with cpu_rows.COMPILE_FLAGS otherwise (`rows_build.py`).

    OMP_NUM_THREADS=2 python experiments/cpu/products_isa.py <name>=<source.c> [<name>=<source.c> ...]

PRODUCTS_ROWS (default 1,2,4,6,8) sets the row counts, PRODUCTS_MARCH (default native,haswell) the builds.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

import torch

from rows_build import build, entry_product, smollm2_products, time_pass  # experiments/cpu/rows_build.py, beside this script

ROUNDS = 7
ROWS = tuple(int(r) for r in os.environ.get("PRODUCTS_ROWS", "1,2,4,6,8").split(","))
MARCHES = os.environ.get("PRODUCTS_MARCH", "native,haswell").split(",")


def main() -> None:
    ws, ps = smollm2_products()
    tmp = tempfile.mkdtemp()
    fns = {}
    for arg in sys.argv[1:]:
        name, source = arg.split("=", 1)
        for march in MARCHES:
            fns[f"{name}, {march}"] = build(source, tmp, f"{name}-{march}", march=march)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; builds: {', '.join(fns)}")
    with torch.inference_mode():
        x = torch.randn(6, ws[0].shape[1])
        outs = []
        for fn in fns.values():
            out = torch.empty(6, ws[0].shape[0])
            fn(x.data_ptr(), ps[0].data_ptr(), out.data_ptr(), 6, ws[0].shape[0], ws[0].shape[1])
            outs.append(out)
        print("every build gives the same bits at 6 rows:", all(torch.equal(o, outs[0]) for o in outs))

        forms = {"F.linear": lambda x, w, p: torch.nn.functional.linear(x, w),
                 **{name: entry_product(fn) for name, fn in fns.items()}}
        cases = [(m, f) for m in ROWS for f in forms]
        times = {c: [] for c in cases}
        for _ in range(ROUNDS + 1):
            for m, form in cases:
                times[m, form].append(time_pass(ws, ps, m, forms[form]))
    print("| rows | " + " | ".join(["F.linear", *fns]) + " |\n|" + " --- |" * (len(fns) + 2))
    for m in ROWS:
        print(f"| {m} | " + " | ".join(f"{statistics.median(times[m, f][1:]) * 1e3:.1f}" for f in ["F.linear", *fns]) + " |")


if __name__ == "__main__":
    main()
