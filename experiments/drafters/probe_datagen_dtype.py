"""Probe (H100/H200), measurement only: the distillation set written in float32 on our decoder's torch path (the
pipeline's data stages until now) against `data.dtype=bfloat16` (the target loaded again in bfloat16, on the decode
engine's path: Triton kernels, batch-invariant products, CUDA graphs; `specbench.train.data.data_writer`).
SmolLM2-135M's architecture with random weights, 768 prompts of 64-191 random tokens sorted by length, 128 new tokens,
samples=2 (greedy, then sampled at 0.7), 384 rows a batch, the layers an EAGLE-3 head records: as `pipeline.sh
wide-data` makes a shard, two shards' worth. Each way is timed after a warm-up; then the bfloat16 writer's greedy
responses through the graphs are compared with the same writer's without them (eager, same kernels).

    python3 experiments/drafters/probe_datagen_dtype.py
"""

from __future__ import annotations

import time

import torch

from specbench.models.loading import load_model, resolve_spec
from specbench.train.data import data_writer, generate_distillation

PROMPTS, NEW, ROWS, LAYERS = 768, 128, 384, (2, 15, 27)


def main() -> None:
    dev = torch.device("cuda")
    target = load_model(resolve_spec({"name": "smollm2-135m-random"}, "target"), dev, torch.float32)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(64, 192, (PROMPTS,), generator=g).sort().values.tolist()
    prompts = [torch.randint(300, 40000, (n,), generator=g).tolist() for n in lengths]
    print(torch.cuda.get_device_name(dev), torch.__version__, flush=True)
    opts = dict(samples=2, temperature=0.7, layers=LAYERS, eos_ids=set(), seed=0, progress=False)
    sets = {}
    for dtype in (torch.float32, torch.bfloat16):
        writer, runner = data_writer(target, dtype)
        generate_distillation(writer, runner, prompts[:ROWS], max_new_tokens=8, batch_size=ROWS, **opts)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sets[dtype] = generate_distillation(writer, runner, prompts, max_new_tokens=NEW, batch_size=ROWS, **opts)
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        new = sum(len(t) - n for t, n in zip(sets[dtype].tokens, sets[dtype].prompt_lengths))
        print(f"{str(dtype)[6:]} ({type(runner).__name__}): {len(sets[dtype])} sequences in {s:.1f} s, {new / s:.0f} "
              f"new tokens/s, {s / 2:.1f} s a shard of {ROWS} prompts x 2; peak memory "
              f"{torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB", flush=True)
        torch.cuda.reset_peak_memory_stats(dev)
        if dtype == torch.bfloat16:  # the same writer without its graphs: greedy responses of the first batch
            eager = generate_distillation(writer, runner.runner, prompts[:ROWS], max_new_tokens=NEW, batch_size=ROWS,
                                          **{**opts, "samples": 1})
            same = sum(torch.equal(a, b) for a, b in zip(eager.tokens, sets[dtype].tokens[:ROWS]))
            print(f"bfloat16 greedy responses, graphs against eager: {same}/{ROWS} identical", flush=True)
    a, b = sets[torch.float32], sets[torch.bfloat16]
    same = sum(torch.equal(x, y) for x, y in zip(a.tokens[:PROMPTS], b.tokens[:PROMPTS]))
    first = [next((i for i, (p, q) in enumerate(zip(x.tolist(), y.tolist())) if p != q), None)
             for x, y in zip(a.tokens[:PROMPTS], b.tokens[:PROMPTS])]
    diverged = sorted(i - n for i, n in zip(first, a.prompt_lengths) if i is not None)
    print(f"greedy responses float32 against bfloat16: {same}/{PROMPTS} identical; where they part, the median new "
          f"token is {diverged[len(diverged) // 2] if diverged else '-'}", flush=True)


if __name__ == "__main__":
    main()
