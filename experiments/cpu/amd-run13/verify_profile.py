"""The default target (SmolLM2-135M, float32, our decoder, the CPU product forms timed as a job times them): a
1-token forward against a 5-token one (the default tree verify's width) at a 200-token prefix, the LM head alone at 1
and 5 rows (median ms of 15 calls, three rounds), then torch.profiler's op table for ten forwards of each. Thirtieth
session, AMD EPYC, nothing else running:

    python experiments/cpu/amd-run13/verify_profile.py > experiments/cpu/amd-run13/verify_profile.txt
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from specbench.models.decoder import DecoderRunner, _linear, time_cpu_forms
from specbench.models.loading import load_model, resolve_spec

PREFIX = 200


def main() -> None:
    torch.manual_seed(0)
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), "cpu", torch.float32)
    runner = DecoderRunner(model.model, batch_invariant=False)
    time_cpu_forms(runner)
    runner.allocate(1, 512)
    with torch.inference_mode():
        runner(torch.randint(0, 1000, (1, PREFIX)), torch.arange(PREFIX)[None], attn_len=PREFIX)

        def forward(t: int) -> None:
            runner(torch.randint(0, 1000, (1, t)), (PREFIX + torch.arange(t))[None], attn_len=PREFIX + t)

        def lm_head(rows: int) -> None:
            _linear(torch.randn(rows, runner.lm_head.weight.shape[1]), runner.lm_head.weight)

        calls = {"forward, 1 token": lambda: forward(1), "forward, 5 tokens": lambda: forward(5),
                 "LM head, 1 row": lambda: lm_head(1), "LM head, 5 rows": lambda: lm_head(5)}
        ms: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(3):
            for name, call in calls.items():
                times = []
                for _ in range(15):
                    start = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - start)
                ms[name].append(1e3 * statistics.median(times))
        for name, values in ms.items():
            print(f"{name}: " + " ".join(f"{v:.2f}" for v in values) + " ms")
        for t in (1, 5):
            for _ in range(3):
                forward(t)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(10):
                    forward(t)
            print(f"=== ten forwards of {t} token(s)")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40))


if __name__ == "__main__":
    main()
