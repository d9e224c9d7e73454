"""Is the CPU default's target-only baseline on its fastest products? "auto" times the product forms of each weight
shape and row count alone (`decoder._time_forms`); this times whole 1-token forwards of SmolLM2-135M (packaged weights,
float32, a 300-token prefix) with every 1-row product forced to one form, beside auto's own choice, and 5-token
forwards (the default tree's verify width) the same way, round by round in turns so that drift hits all alike. Each
entry is the best of 3 forwards in a round; medians over the rounds, and the ratio to auto's 1-token forward.

    OMP_NUM_THREADS=2 python experiments/cpu/baseline_forms.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PREFIX = 300
FORMS = {1: {"auto": None, "transposed, padded to 2 rows": ("transposed", 2), "packed": ("packed", 1),
             "F.linear": ("linear", 1)},
         5: {"auto": None, "transposed": ("transposed", 5), "transposed, padded to 6 rows": ("transposed", 6),
             "packed": ("packed", 5), "F.linear": ("linear", 5)}}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    runner.allocate(1, 512)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 40000, (1, PREFIX), generator=g)
    with torch.inference_mode():
        runner(prompt, torch.arange(PREFIX)[None], attn_len=PREFIX)

        def forward(t: int) -> float:
            tokens = torch.randint(0, 40000, (1, t), generator=g)
            start = time.perf_counter()
            runner(tokens, torch.arange(PREFIX, PREFIX + t)[None], attn_len=PREFIX + t)
            return time.perf_counter() - start

        forward(1), forward(5)  # auto times its forms here
        auto = dict(dec._CPU_FORMS)
        print("auto's forms:", {f"{k[0]}x{k[1]} rows {k[3]}": v for k, v in sorted(auto.items())}, flush=True)
        times: dict[str, list[float]] = {f"{t} token(s), {name}": [] for t, forms in FORMS.items() for name in forms}
        for _ in range(rounds):
            for t, forms in FORMS.items():
                for name, form in forms.items():
                    dec._CPU_FORMS.update(auto)
                    if form is not None:
                        dec._CPU_FORMS.update({k: form for k in auto if k[3] == t})
                    forward(t)  # untimed: the first pass after a switch (oneDNN copies, caches)
                    times[f"{t} token(s), {name}"].append(min(forward(t) for _ in range(3)))
            dec._CPU_FORMS.update(auto)
    base = statistics.median(times["1 token(s), auto"])
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4)
        print(f"{name:42s} median {statistics.median(ts) * 1e3:6.2f} ms  (quartiles {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f})"
              f"  / auto's 1-token {statistics.median(ts) / base:.2f}")


if __name__ == "__main__":
    main()
