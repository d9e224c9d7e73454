"""Side by side in one run: our decoder's float32 CPU forward of SmolLM2-135M (packaged weights, a 300-token prefix) at
1, 4 and 5 new tokens, every GEMM forced to one product form: `weight @ x.T` (odd row counts padded with a zero row,
what "auto" picked for them before the packed form existed) or oneDNN's product on a packed copy ("packed",
decoder.ONEDNN_FP32_PACK_ROWS). What the `auto` timing chooses between, measured inside whole forwards.

    OMP_NUM_THREADS=2 python experiments/cpu/forward_packed.py

Each setting runs 10 rounds of 2 timed forwards after one untimed, the settings alternating round by round; prints
the median and the fastest ms per forward, and r: the median over the 1-token forward's with `weight @ x.T` (the
1-token step target-only decoding takes where "auto" picks that form for 1 row, as it did on this CPU).
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

ROUNDS = 10


def main() -> None:
    spec = resolve_spec({"name": "smollm2-135m"}, "target")
    runner = dec.DecoderRunner(load_model(spec, torch.device("cpu"), torch.float32).model)
    runner.allocate(1, 512)
    weights = [w[n] for w in runner._w for n in ("qkv_w", "o_w", "gu_w", "down_w")] + [runner.lm_head.weight]
    shapes = {tuple(w.shape) for w in weights}

    def force(rows: int, form: str) -> None:
        computed = rows + 1 if form == "transposed" and rows % 2 else rows
        for n, k in shapes:
            dec._CPU_FORMS[(n, k, torch.float32, rows, False)] = (form, computed)

    def forward(t: int) -> None:
        tokens = torch.randint(0, 40000, (1, t))
        runner(tokens, torch.arange(300, 300 + t)[None], attn_len=300 + t, want_hidden=True)

    settings = [(t, form) for t in (1, 4, 5) for form in ("transposed", "packed")]
    times: dict[tuple[int, str], list[float]] = {s: [] for s in settings}
    with torch.inference_mode():
        for w in weights:
            dec._onednn_copy(w)
        for _ in range(ROUNDS):
            for t, form in settings:
                force(t, form)
                forward(t)
                start = time.perf_counter()
                forward(t)
                forward(t)
                times[(t, form)].append((time.perf_counter() - start) / 2 * 1e3)
    print(f"torch {torch.__version__}, threads: {torch.get_num_threads()}")
    print("| tokens | form | median ms | fastest ms | r (median over the 1-token `weight @ x.T` forward's) |")
    print("|---|---|---|---|---|")
    for t, form in settings:
        med = statistics.median(times[(t, form)])
        r = med / statistics.median(times[(1, "transposed")])
        print(f"| {t} | {form} | {med:.1f} | {min(times[(t, form)]):.1f} | {r:.2f} |")


if __name__ == "__main__":
    main()
