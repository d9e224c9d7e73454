"""For the experiments that time builds of the row product (kernels/cpu_rows.c) other than the one specbench loads:
compile a source with cpu_rows.COMPILE_FLAGS, another -march and extra -D defines, into a directory, and return its
entry point with its argument types (`cpu_rows.compile_to`, `cpu_rows.entry`); SmolLM2-135M's product weights; and
one timed pass of a product over them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from specbench.kernels import cpu_rows


def build(source: str | Path, tmp: str | Path, name: str, march: str = "native", defines: tuple[str, ...] = ()):
    """specbench_rows_gemm(x, packed, y, M, N, K) of `source` built as cpu_rows builds it, but for -march=`march` and
    with -D`defines`, as `tmp`/`name`.so."""
    return cpu_rows.entry(cpu_rows.compile_to(Path(tmp) / f"{name}.so", Path(source), march, tuple(defines)))


def smollm2_products() -> tuple[list, list]:
    """SmolLM2-135M's float32 product weights as a forward meets them (every layer's qkv, o, gate/up and down weights,
    then the LM head) and their copies packed for the row product."""
    import torch

    import specbench.models.decoder as dec
    from specbench.models.loading import load_model, resolve_spec

    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    ws = [w[n] for w in runner._w for n in ("qkv_w", "o_w", "gu_w", "down_w")] + [runner.lm_head.weight]
    return ws, [cpu_rows.pack(w) for w in ws]


def entry_product(fn) -> Callable:
    """A built entry point (`build`) as product(x, weight, packed), into a new output tensor."""
    import torch

    def product(x, w, p):
        out = torch.empty(x.shape[0], w.shape[0])
        fn(x.data_ptr(), p.data_ptr(), out.data_ptr(), x.shape[0], w.shape[0], w.shape[1])
    return product


def time_pass(ws: list, ps: list, m: int, product: Callable) -> float:
    """Seconds of one pass of `product(x, weight, packed)` over the weights in order (as a forward streams them), on
    m random rows of each weight's inner size."""
    import torch

    xs = {w.shape[1]: torch.randn(m, w.shape[1]) for w in ws}
    start = time.perf_counter()
    for w, p in zip(ws, ps):
        product(xs[w.shape[1]], w, p)
    return time.perf_counter() - start
