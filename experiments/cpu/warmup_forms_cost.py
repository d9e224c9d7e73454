"""What the CPU warm-up's form timing (`decoder.time_cpu_forms`) costs with and without the row buckets above 8 rows
(`decoder.AUTO_BUCKETS`): SmolLM2-135M's own products (packaged weights, float32), timed from scratch twice each way,
alternating. Prints the bucket tops, how many (shape, row count) pairs it timed, and the seconds.

    OMP_NUM_THREADS=2 python experiments/cpu/warmup_forms_cost.py
"""

from __future__ import annotations

import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec


def main() -> None:
    torch.set_grad_enabled(False)
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    for buckets in ((), (16, 32, 64), (), (16, 32, 64)):
        dec.AUTO_BUCKETS = buckets
        dec._CPU_FORMS.clear()
        start = time.perf_counter()
        timed = dec.time_cpu_forms(runner)
        print(f"buckets {buckets}: {timed} (shape, rows) timed in {time.perf_counter() - start:.2f} s", flush=True)


if __name__ == "__main__":
    main()
