"""Float16 copies of a drafter's weights on a CPU without oneDNN bf16 (strategy.cpu_half_weights): per product, ms
for the decoder's float32 form ("auto": `decoder._linear`) against F.linear on a float16 copy (input rounded to
float16, result back to float32), weights streaming from memory (64 MB of copies); then one EAGLE draft pass of the
shipped head on the packaged SmolLM2-135M (1 row, head forward + logits, median of 200) both ways.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_half.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from specbench.models import decoder as dec
from specbench.models.loading import load_model, resolve_spec
from specbench.run import CONF_DIR
from specbench.strategies.checkpoints import resolve_checkpoint
from specbench.strategies.eagle import load_eagle_head

SHAPES = [(8192, 576), (1536, 576), (576, 1536), (576, 1152)]  # the head's LM head, gate/up, down, fc
ROWS = (1, 2, 3, 4, 8, 16)


def per_call(fn, calls: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def products() -> None:
    print("| weight [N, K] | rows | float32 (decoder's form) ms | float16 copy ms |")
    print("| --- | --- | --- | --- |")
    g = torch.Generator().manual_seed(0)
    for n, k in SHAPES:
        copies = max(1, (64 << 20) // (n * k * 4))
        w32 = torch.randn(copies, n, k, generator=g)
        w16 = w32.to(torch.float16)
        for rows in ROWS:
            x = torch.randn(rows, k, generator=g)
            with torch.inference_mode():
                t32 = per_call(lambda: [dec._linear(x, w) for w in w32], 5) / copies
                t16 = per_call(lambda: [F.linear(x.to(torch.float16), h).float() for h in w16], 5) / copies
            print(f"| {n} x {k} | {rows} | {t32:.3f} | {t16:.3f} |")


def head_pass() -> None:
    spec = resolve_spec(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / "smollm2-135m.yaml")), "target")
    target = load_model(spec, "cpu", torch.float32).model
    checkpoint = resolve_checkpoint("auto", "eagle", spec)
    for half in (False, True):
        head = load_eagle_head(checkpoint, target, spec.label)
        dec.pack_linears(head, half_weights=half)
        dec.time_cpu_forms(head)
        head.allocate(1, 512, torch.device("cpu"), torch.float32)
        feature, token = torch.randn(1, 1, head.cfg.hidden_size), torch.tensor([[100]])
        times = []
        with torch.inference_mode():
            for i in range(220):
                start = time.perf_counter()
                out = head(feature, token, torch.tensor([[200 + i % 100]]), use_cache=True, attn_len=301)
                head.logits(out).float()
                times.append(time.perf_counter() - start)
        print(f"draft pass, cpu_half_weights={str(half).lower()}: median {statistics.median(times[20:]) * 1e3:.2f} ms")


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, onednn_bf16={dec.onednn_bf16()}")
    products()
    head_pass()
