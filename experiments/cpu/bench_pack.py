"""Side by side in one run: our decoder's bit-invariant bf16 CPU forward of SmolLM2-135M (packaged weights) with its
oneDNN weights packed for 1 row and for decoder.ONEDNN_PACK_ROWS (16) rows, next to the fp32 forward.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_pack.py

Each (new tokens) shape at a 300-token prefix is timed in 10 rounds of 3 forwards per setting, the settings
alternating round by round; prints the median ms per forward. The product is row-invariant at both packings
(tests/models/test_decoder_cpu_bf16.py runs at the default).
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec


def main() -> None:
    spec = resolve_spec({"name": "smollm2-135m"}, "target")
    bf16 = load_model(spec, torch.device("cpu"), torch.bfloat16).model
    fp32 = load_model(spec, torch.device("cpu"), torch.float32).model
    default = dec.ONEDNN_PACK_ROWS
    runners = {}
    try:
        for rows in (1, default):
            dec.ONEDNN_PACK_ROWS = rows  # read when the runner packs its weights
            runners[f"bf16 invariant, packed for {rows} row{'s' if rows > 1 else ''}"] = dec.DecoderRunner(bf16)
    finally:
        dec.ONEDNN_PACK_ROWS = default
    runners["fp32"] = dec.DecoderRunner(fp32)
    times: dict[tuple[str, int], list[float]] = {}
    with torch.inference_mode():
        for runner in runners.values():
            runner.allocate(1, 512)
        for t in (1, 4):
            tokens, positions = torch.randint(0, 40000, (1, t)), torch.arange(300, 300 + t)[None]
            for _ in range(10):
                for name, runner in runners.items():
                    runner(tokens, positions, attn_len=300 + t)  # warm
                    t0 = time.perf_counter()
                    for _ in range(3):
                        runner(tokens, positions, attn_len=300 + t)
                    times.setdefault((name, t), []).append((time.perf_counter() - t0) / 3 * 1e3)
    print(f"torch {torch.__version__}, threads: {torch.get_num_threads()}")
    print("| setting | 1 x 1 ms | 1 x 4 ms |\n|---|---|---|")
    for name in runners:
        print(f"| {name} | {statistics.median(times[(name, 1)]):.1f} | {statistics.median(times[(name, 4)]):.1f} |")


if __name__ == "__main__":
    main()
