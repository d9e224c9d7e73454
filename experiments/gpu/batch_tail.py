"""How long a static batch runs against its mean row, under synthetic acceptance: each row gains 1 + Bernoulli(rate)
tokens a step (k=1) until it has max_new_tokens; the batch steps until its slowest row is done. frontdoor.sh block 3
(batch 64, k=1 at rate 0.7655, 64 tokens) divides the batch's output by that wall time, while the speed model's
AL / (r + draft) is per step of the mean row. Target-only decoding has no tail (every row takes exactly 64 steps).

    python experiments/gpu/batch_tail.py [rate] [rows] [tokens]
"""

from __future__ import annotations

import sys

import numpy as np


def steps_to_finish(rng: np.random.Generator, rows: int, tokens: int, rate: float) -> np.ndarray:
    have, steps = np.zeros(rows), np.zeros(rows, dtype=int)
    while (active := have < tokens).any():
        have[active] += 1 + (rng.random(active.sum()) < rate)
        steps[active] += 1
    return steps


def main() -> None:
    rate, rows, tokens = float(sys.argv[1]) if len(sys.argv) > 1 else 0.7655, 64, 64
    if len(sys.argv) > 2:
        rows = int(sys.argv[2])
    if len(sys.argv) > 3:
        tokens = int(sys.argv[3])
    rng = np.random.default_rng(0)
    runs = np.stack([steps_to_finish(rng, rows, tokens, rate) for _ in range(2000)])
    mean_row, batch = runs.mean(), runs.max(axis=1).mean()
    print(f"rate {rate}, {rows} rows x {tokens} tokens, 2000 batches: a row needs {mean_row:.2f} steps on average, "
          f"the batch runs {batch:.2f} (its slowest row): {batch / mean_row:.3f}x the mean row")


if __name__ == "__main__":
    main()
