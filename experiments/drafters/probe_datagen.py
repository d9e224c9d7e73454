"""Probe (H100/H200), measurement only: how fast `specbench.train.data.generate_distillation` (the pipeline's data
stages: the target's responses with its features, fp32, our decoder's torch path, the Engine with strategy none)
decodes at the pipeline's batch of 384 rows and at larger ones. SmolLM2-135M's architecture with random weights (no
GGUF needed), 768 prompts of 64-191 random tokens, 64 new tokens each, no stop token, samples=2 (greedy, then
sampled at 0.7) as `pipeline.sh wide-data` runs; the same prompts at every batch size, each timed after a warm-up.

    python3 experiments/drafters/probe_datagen.py
"""

from __future__ import annotations

import time

import torch

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import LoadedModel, load_model, resolve_spec
from specbench.train.data import generate_distillation

PROMPTS, NEW = 768, 64


def setup(count: int) -> tuple[torch.device, LoadedModel, DecoderRunner, list[list[int]]]:
    """The data probes' target (SmolLM2-135M's architecture, random weights, fp32, our decoder's torch path, on CUDA)
    and `count` prompts of 64-191 random tokens, sorted by length as the shards are (probe_datagen_ops.py too)."""
    dev = torch.device("cuda")
    target = load_model(resolve_spec({"name": "smollm2-135m-random"}, "target"), dev, torch.float32)
    runner = DecoderRunner(target.model, use_kernels=False)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(64, 192, (count,), generator=g).sort().values.tolist()
    prompts = [torch.randint(300, 40000, (n,), generator=g).tolist() for n in lengths]
    print(torch.cuda.get_device_name(dev), torch.__version__, flush=True)
    return dev, target, runner, prompts


def main() -> None:
    dev, target, runner, prompts = setup(PROMPTS)
    generate_distillation(target, runner, prompts[:64], max_new_tokens=8, samples=2, temperature=0.7, batch_size=64,
                          layers=(), eos_ids=set(), seed=0, progress=False)  # warm-up
    for bsz in (384, 768):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        data = generate_distillation(target, runner, prompts, max_new_tokens=NEW, samples=2, temperature=0.7,
                                     batch_size=bsz, layers=(), eos_ids=set(), seed=0, progress=False)
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        new = 2 * PROMPTS * NEW
        steps = 2 * -(-PROMPTS // bsz) * NEW
        print(f"batch {bsz}: {len(data)} sequences in {s:.1f} s, {new / s:.0f} new tokens/s, "
              f"{1e3 * s / steps:.1f} ms a decode step (prefill included), peak memory "
              f"{torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB", flush=True)
        torch.cuda.reset_peak_memory_stats(dev)


if __name__ == "__main__":
    main()
