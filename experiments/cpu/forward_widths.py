"""Whole forwards of SmolLM2-135M (packaged weights, float32, batch 1, a 300-token prefix) at several token counts,
with "auto" deciding product forms for 1..8 rows only (AUTO_BUCKETS off: 9 rows and more take F.linear, as until
8ac04bf) and for 1..64 rows (the buckets on), alternating in one process; medians of 8 rounds, best of 2 a round,
and each width's ratio to the 1-token forward.

    OMP_NUM_THREADS=2 python experiments/cpu/forward_widths.py
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PREFIX, WIDTHS, ROUNDS = 300, (1, 5, 9, 12, 17, 24, 33), 8
SIDES = {"F.linear above 8 rows": (), "buckets": (16, 32, 64)}


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    runner.allocate(1, 512)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        runner(torch.randint(0, 40000, (1, PREFIX), generator=g), torch.arange(PREFIX)[None], attn_len=PREFIX)

        def forward(t: int, buckets: tuple[int, ...]) -> float:
            dec.AUTO_BUCKETS = buckets
            tokens = torch.randint(0, 40000, (1, t), generator=g)
            start = time.perf_counter()
            runner(tokens, torch.arange(PREFIX, PREFIX + t)[None], attn_len=PREFIX + t)
            return time.perf_counter() - start

        for t in WIDTHS:  # the forms are timed on first use here
            for buckets in SIDES.values():
                forward(t, buckets)
        times = {(t, side): [] for t in WIDTHS for side in SIDES}
        for _ in range(ROUNDS):
            for t in WIDTHS:
                for side, buckets in SIDES.items():
                    times[t, side].append(min(forward(t, buckets) for _ in range(2)))
    one = statistics.median(times[1, "F.linear above 8 rows"])
    for t in WIDTHS:
        print(f"{t:3d} tokens: " + "   ".join(f"{side} {statistics.median(times[t, side]) * 1e3:6.1f} ms "
                                             f"({statistics.median(times[t, side]) / one:.2f}x)" for side in SIDES))


if __name__ == "__main__":
    main()
