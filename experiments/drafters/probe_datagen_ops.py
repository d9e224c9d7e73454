"""Probe (H100/H200), measurement only: where a step of `generate_distillation` goes on the GPU, and what would
make it cheaper. probe_datagen.py found its decode step proportional to the rows (38 ms at 384, 74 ms at 768 on an
H200: datagen-run1/), where SmolLM2-135M's arithmetic at 384 rows is ~0.1 TFLOP a step. Same setup (random weights,
fp32, our decoder's torch path, 64-191-token prompts), 384 prompts, greedy. Each way is timed at 8 and 32 new tokens
(the difference is 24 decode steps), and its tokens are compared with the first way's:

- enable_gqa: SDPA's grouped call under a mask, as the library made it until masked_attention folded it on CUDA
  in float32 (SDPA takes its math path there, which copies the keys and values out to every query head);
- tf32: the same, with float32 products on the tensor cores (torch.backends.cuda.matmul.allow_tf32);
- fold: the library's masked_attention (the grouped-query attention as plain multi-head attention over the
  key/value heads, each head's group of queries folded into the query axis, no copy of the cache);
- expand: the keys and values copied out to the query heads by hand, then SDPA without enable_gqa.

Each way patches the probe's own process only (decoder.masked_attention or a torch flag), not the library.
Then torch.profiler's CUDA kernels by total time for "enable_gqa", and the attention alone in each form (CUDA events,
median of 20) at the datagen's decode shape (fp32, 384 rows, 9 query / 3 key-value heads, 1 query, 255 slots) and at an
8B target's prefill (bf16, 1 row, 32 / 8 heads of 128, 1024 queries over 1024 slots), as the bf16 path's prefill calls
SDPA with a causal mask and enable_gqa too, and, forward and backward, at an EAGLE head's training batch (fp32, 32
sequences of 384 tokens, the head's 9 / 3 heads of 64).

    python3 experiments/drafters/probe_datagen_ops.py
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import specbench.models.decoder as decoder
from specbench.models.decoder import masked_attention
from probe_datagen import setup
from specbench.train.data import generate_distillation

ROWS, NEW = 384, 8
SDPA = F.scaled_dot_product_attention


def fold(q, k, v, attn_mask=None, scale=None, enable_gqa=False):
    """The library's own: q [B, Hq, T, D] over k, v [B, Hkv, S, D] as Hkv heads of G * T queries."""
    return masked_attention(q, k, v, attn_mask, scale, fold=True)


def expand(q, k, v, attn_mask=None, scale=None, enable_gqa=False):
    g = q.shape[1] // k.shape[1]
    if enable_gqa and g > 1:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return SDPA(q, k, v, attn_mask=attn_mask, scale=scale)


def grouped(q, k, v, mask, scale):
    """SDPA's grouped call (enable_gqa) under the mask, not folded."""
    return masked_attention(q, k, v, mask, scale, fold=False)


WAYS = {  # what the decoder's torch path calls for its attention, by way
    "enable_gqa": grouped,
    "tf32": grouped,  # with TF32 products (way() sets the flag)
    "fold": fold,
    "expand": lambda q, k, v, mask, scale: expand(q, k, v, mask, scale, enable_gqa=True),
}


@contextmanager
def way(name: str):
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    decoder.masked_attention = WAYS[name]
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        decoder.masked_attention = masked_attention


def main() -> None:
    dev, target, runner, prompts = setup(ROWS)  # probe_datagen.py's target and prompts

    def run(new: int):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        data = generate_distillation(target, runner, prompts, max_new_tokens=new, samples=1, temperature=0.7,
                                     batch_size=ROWS, layers=(), eos_ids=set(), seed=0, progress=False)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, data.tokens

    first = None
    for name in ("enable_gqa", "tf32", "fold", "expand", "enable_gqa"):
        with way(name):
            run(NEW)  # warm-up
            (t_short, _), (t_long, tokens) = run(NEW), run(4 * NEW)
        first = first or tokens
        same = sum(torch.equal(a, b) for a, b in zip(tokens, first))
        step = (t_long - t_short) / (3 * NEW)
        print(f"{name}: {ROWS} rows, {NEW} new tokens {t_short:.2f} s, {4 * NEW} new tokens {t_long:.2f} s: "
              f"{1e3 * step:.1f} ms a decode step, prefill + setup {t_short - NEW * step:.2f} s; "
              f"{same}/{len(tokens)} sequences identical to the first way's", flush=True)
    with way("enable_gqa"), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run(NEW)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60), flush=True)
    shapes = ((torch.float32, ROWS, 9, 3, 1, 255, 64, False), (torch.bfloat16, 1, 32, 8, 1024, 1024, 128, False),
              (torch.float32, 32, 9, 3, 384, 384, 64, True))
    for dtype, b, hq, hkv, t, s, d, train in shapes:
        q = torch.randn(b, hq, t, d, device=dev, dtype=dtype, requires_grad=train)
        k, v = (torch.randn(b, hkv, s, d, device=dev, dtype=dtype, requires_grad=train) for _ in range(2))
        pos = (s - t + torch.arange(t, device=dev)).expand(b, t)
        mask = torch.arange(s, device=dev)[None, None, None, :] <= pos[:, None, :, None]  # [B, 1, T, S]
        ref = SDPA(q, k, v, attn_mask=mask, scale=d**-0.5, enable_gqa=True)
        line = []
        for name, fn in (("enable_gqa", SDPA), ("fold", fold), ("expand", expand)):
            ms = []
            for _ in range(25):
                a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                o = fn(q, k, v, attn_mask=mask, scale=d**-0.5, enable_gqa=True)
                if train:
                    o.sum().backward()
                z.record()
                torch.cuda.synchronize()
                ms.append(a.elapsed_time(z))
            err = (o.float() - ref.float()).abs().max().item()
            line.append(f"{name} {1e3 * sorted(ms[5:])[10]:.0f} us (max |diff| {err:.1e})")
        print(f"attention {str(dtype)[6:]} q {list(q.shape)} kv {list(k.shape)}{' forward + backward' if train else ''}: "
              + ", ".join(line), flush=True)


if __name__ == "__main__":
    main()
