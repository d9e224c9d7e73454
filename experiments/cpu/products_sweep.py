"""SmolLM2-135M's float32 products as a forward makes them (every layer's qkv, o, gate/up and down weights, then the
LM head, 538 MB, in that order, so they stream from memory as in a forward), one pass at a time, for 1-8 rows:
torch's F.linear and `weight @ x.T`, and our row product (kernels/cpu_rows.c) as built now and as built without its
software prefetch (-DPREFETCH_K=0, compiled here into a temporary directory by `rows_build.py`). The forms alternate
pass by pass; medians of ROUNDS passes after one untimed, in ms a pass.

    OMP_NUM_THREADS=2 python experiments/cpu/products_sweep.py
"""

from __future__ import annotations

import statistics
import tempfile

import torch

from specbench.kernels import cpu_rows
from rows_build import build, entry_product, smollm2_products, time_pass  # experiments/cpu/rows_build.py, beside this script

ROUNDS = 9
CASES = [(1, "F.linear"), (1, "weight @ x.T"), (1, "rows"), (1, "rows, no prefetch"), (2, "rows"),
         (2, "rows, no prefetch"), (4, "F.linear"), (4, "rows"), (4, "rows, no prefetch"), (6, "F.linear"), (6, "rows"),
         (6, "rows, no prefetch"), (8, "rows"), (8, "rows, no prefetch")]


def main() -> None:
    ws, ps = smollm2_products()
    print(f"{len(ws)} weights, {sum(w.numel() for w in ws) * 4 / 1e6:.0f} MB; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        plain = build(cpu_rows.SOURCE, tmp, "no-prefetch", defines=("PREFETCH_K=0",))

        forms = {"F.linear": lambda x, w, p: torch.nn.functional.linear(x, w), "weight @ x.T": lambda x, w, p: w @ x.T,
                 "rows": lambda x, w, p: cpu_rows.linear(x, p, w.shape[0]), "rows, no prefetch": entry_product(plain)}
        times = {c: [] for c in CASES}
        for _ in range(ROUNDS + 1):
            for m, form in CASES:
                times[m, form].append(time_pass(ws, ps, m, forms[form]))
    one = statistics.median(times[1, "F.linear"][1:])
    print("| rows | form | ms a pass | against F.linear at 1 row |\n| --- | --- | --- | --- |")
    for m, form in CASES:
        ms = statistics.median(times[m, form][1:])
        print(f"| {m} | {form} | {ms * 1e3:.1f} | {ms / one:.2f}x |")


if __name__ == "__main__":
    main()
