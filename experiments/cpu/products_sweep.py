"""SmolLM2-135M's float32 products as a forward makes them (every layer's qkv, o, gate/up and down weights, then the
LM head, 538 MB, in that order, so they stream from memory as in a forward), one pass at a time, for 1-8 rows:
torch's F.linear and `weight @ x.T`, and our row product (kernels/cpu_rows.c) as built now and as built without its
software prefetch (-DPREFETCH_K=0, compiled here into a temporary directory). The forms alternate pass by pass;
medians of ROUNDS passes after one untimed, in ms a pass.

    OMP_NUM_THREADS=2 python experiments/cpu/products_sweep.py
"""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

import specbench.models.decoder as dec
from specbench.kernels import cpu_rows
from specbench.models.loading import load_model, resolve_spec

ROUNDS = 9
CASES = [(1, "F.linear"), (1, "weight @ x.T"), (1, "rows"), (1, "rows, no prefetch"), (2, "rows"),
         (2, "rows, no prefetch"), (4, "F.linear"), (4, "rows"), (4, "rows, no prefetch"), (6, "F.linear"), (6, "rows"),
         (6, "rows, no prefetch"), (8, "rows"), (8, "rows, no prefetch")]


def no_prefetch_library(tmp: str) -> ctypes.CDLL:
    obj, lib = Path(tmp) / "k.o", Path(tmp) / "k.so"
    cc = cpu_rows._compiler()
    subprocess.run([cc, *cpu_rows.COMPILE_FLAGS, "-DPREFETCH_K=0", "-c", str(cpu_rows.SOURCE), "-o", str(obj)], check=True)
    subprocess.run([cc, "-shared", str(obj), "-o", str(lib)], check=True)
    fn = ctypes.CDLL(str(lib)).specbench_rows_gemm
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3
    return fn


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    ws = [w[n] for w in runner._w for n in ("qkv_w", "o_w", "gu_w", "down_w")] + [runner.lm_head.weight]
    ps = [cpu_rows.pack(w) for w in ws]
    print(f"{len(ws)} weights, {sum(w.numel() for w in ws) * 4 / 1e6:.0f} MB; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        plain = no_prefetch_library(tmp)

        def sweep(m: int, form: str) -> float:
            xs = {w.shape[1]: torch.randn(m, w.shape[1]) for w in ws}
            start = time.perf_counter()
            for w, p in zip(ws, ps):
                x = xs[w.shape[1]]
                if form == "F.linear":
                    torch.nn.functional.linear(x, w)
                elif form == "weight @ x.T":
                    w @ x.T
                elif form == "rows":
                    cpu_rows.linear(x, p, w.shape[0])
                else:
                    out = torch.empty(m, w.shape[0])
                    plain(x.data_ptr(), p.data_ptr(), out.data_ptr(), m, w.shape[0], w.shape[1])
            return time.perf_counter() - start

        times = {c: [] for c in CASES}
        for _ in range(ROUNDS + 1):
            for c in CASES:
                times[c].append(sweep(*c))
    one = statistics.median(times[1, "F.linear"][1:])
    print("| rows | form | ms a pass | against F.linear at 1 row |\n| --- | --- | --- | --- |")
    for m, form in CASES:
        ms = statistics.median(times[m, form][1:])
        print(f"| {m} | {form} | {ms * 1e3:.1f} | {ms / one:.2f}x |")


if __name__ == "__main__":
    main()
