"""Where a 6-token verify forward's extra time goes against a 1-token forward: SmolLM2-135M (packaged weights,
float32, batch 1, a 300-token prefix) on our decoder with the "auto" product forms, forwards at 1 and 6 tokens in
turns, the products (decoder._linear) and the attention (decoder.masked_attention) timed inside each forward with
perf_counter. Medians of ROUNDS forwards each; the rest of a forward is norms, rope, cache writes and Python.

    OMP_NUM_THREADS=2 python experiments/cpu/verify_split.py
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PREFIX, WIDTHS, ROUNDS = 300, (1, 6), 15
spent: dict[str, float] = {"products": 0.0, "attention": 0.0}


def timed(name: str, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        spent[name] += time.perf_counter() - start
        return out
    return wrapper


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    runner.allocate(1, 512)
    dec._linear = timed("products", dec._linear)
    dec.masked_attention = timed("attention", dec.masked_attention)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        runner(torch.randint(0, 40000, (1, PREFIX), generator=g), torch.arange(PREFIX)[None], attn_len=PREFIX)
        inputs = {t: torch.randint(0, 40000, (1, t), generator=g) for t in WIDTHS}
        rows: dict[int, list[tuple[float, float, float]]] = {t: [] for t in WIDTHS}
        for round_ in range(ROUNDS + 2):  # the first two rounds time the product forms and warm up
            for t in WIDTHS:
                spent.update(products=0.0, attention=0.0)
                start = time.perf_counter()
                runner(inputs[t], torch.arange(PREFIX, PREFIX + t)[None], attn_len=PREFIX + t)
                if round_ >= 2:
                    rows[t].append((time.perf_counter() - start, spent["products"], spent["attention"]))
    forms = {f"{k[0]}x{k[1]}/{k[3]}": v[0] for k, v in dec._CPU_FORMS.items()}
    print("forms:", forms)
    med = {t: [statistics.median(r[i] for r in rows[t]) * 1e3 for i in range(3)] for t in WIDTHS}
    print(f"{'tokens':>6} {'forward ms':>10} {'products':>9} {'attention':>9} {'the rest':>9}")
    for t in WIDTHS:
        f, p, a = med[t]
        print(f"{t:6d} {f:10.2f} {p:9.2f} {a:9.2f} {f - p - a:9.2f}")
    f1, p1, a1 = med[1]
    f6, p6, a6 = med[6]
    print(f"6 / 1: forward {f6 / f1:.3f}; of the {f6 - f1:.2f} ms more: products {p6 - p1:.2f}, attention "
          f"{a6 - a1:.2f}, the rest {(f6 - p6 - a6) - (f1 - p1 - a1):.2f}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
