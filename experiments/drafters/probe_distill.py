"""Probe, measurement only: where a distillation step's time goes (specbench.train.data.generate_distillation, the
stage that bounds how much training data one device command makes: ~4.2 M tokens in ~270 s on the H200 in the vocab
run, which puts a batch-384 step of a 135M model at about 33 ms or more, an estimate from that log). One batch of
random prompts, timed whole, then one decode step of the same runner profiled by kernel (CUDA) or operator (CPU).

    python3 experiments/drafters/probe_distill.py                          # smollm2-135m on cuda, batch 384
    python3 experiments/drafters/probe_distill.py --target tiny-qwen3 --device cpu --batch 16   # a CPU check
"""

from __future__ import annotations

import argparse
import collections
import time

import torch
from torch.profiler import ProfilerActivity, profile

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.train.data import generate_distillation


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=384)
    ap.add_argument("--prompt", type=int, default=120, help="prompt tokens a row")
    ap.add_argument("--new", type=int, default=128, help="new tokens a row")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    target = load_model(resolve_spec({"name": a.target}, "target"), dev, torch.float32)  # as train.data runs it
    runner = DecoderRunner(target.model, use_kernels=False)
    prompts = torch.randint(3, min(target.vocab_size, 30000), (a.batch, a.prompt)).tolist()
    run = lambda: generate_distillation(target, runner, prompts, max_new_tokens=a.new, samples=1,  # noqa: E731
                                        temperature=0.7, batch_size=a.batch, layers=(), eos_ids=set(), seed=0,
                                        progress=False)
    run()  # first calls pick kernels
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    data = run()
    sync()
    total = time.perf_counter() - t0
    tokens = sum(len(t) - p for t, p in zip(data.tokens, data.prompt_lengths))
    print(f"{a.target} on {dev}, batch {a.batch}, {a.prompt}-token prompts, {a.new} new: {total:.2f} s, "
          f"{tokens} new tokens, {1e3 * total / a.new:.1f} ms a step, {tokens / total:.0f} tokens/s", flush=True)
    runner.allocate(a.batch, a.prompt + a.new + 8)
    tok = torch.tensor(prompts, device=dev)
    pos = torch.arange(a.prompt, device=dev).expand(a.batch, -1)
    runner(tok, pos, attn_len=a.prompt)
    step = lambda: runner(tok[:, -1:], pos[:, -1:] + 1, attn_len=a.prompt + 1)  # noqa: E731
    step()
    sync()
    activity = ProfilerActivity.CUDA if dev.type == "cuda" else ProfilerActivity.CPU
    t0 = time.perf_counter()
    with profile(activities=[activity]) as prof:
        step()
        sync()
    wall = time.perf_counter() - t0
    events = [e for e in prof.events() if (e.device_type == torch.autograd.DeviceType.CUDA) == (dev.type == "cuda")]
    by_name: collections.Counter[str] = collections.Counter()
    for e in events:
        by_name[e.name[:70]] += e.device_time if dev.type == "cuda" else e.self_cpu_time_total
    print(f"one decode step of the target (profiled, wall {1e3 * wall:.1f} ms): {sum(by_name.values()) / 1e3:.2f} ms "
          f"in {len(events)} {'kernels' if dev.type == 'cuda' else 'operators'}", flush=True)
    for name, us in by_name.most_common(10):
        print(f"    {us / 1e3:.3f} ms  {name}", flush=True)


if __name__ == "__main__":
    main()
