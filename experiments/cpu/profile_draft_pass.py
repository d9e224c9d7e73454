"""Profiles EagleProposer.draft_forward inside `python -m specbench logger=none baseline=false dataset.num_prompts=4`
(torch.profiler around each call after the 59th): self CPU time per call by op, and the calls' shapes. The
measurement behind experiments/cpu/README.md's "Tried, not landed: the EAGLE head's products in bf16" (2026-12-04;
first run as a scratch script of the same code): with `patches/draft-bf16-form.patch` applied, `bf16=True` and
`bf16=False` set its switch; without the patch, give neither (the package's own forms).

    OMP_NUM_THREADS=2 python experiments/cpu/profile_draft_pass.py [bf16=True|bf16=False]
"""

from __future__ import annotations

import atexit
import collections
import runpy
import sys

from torch.profiler import ProfilerActivity, profile

import specbench.models.decoder as dec
import specbench.strategies.eagle as eagle

SKIP = 59
self_us: dict[str, float] = collections.defaultdict(float)
counts: collections.Counter = collections.Counter()
shapes: collections.Counter = collections.Counter()
calls = [0]
draft_forward = eagle.EagleProposer.draft_forward


def profiled(self, tokens, positions, hidden, attn_len, slots=None, tree_path=None):
    calls[0] += 1
    if calls[0] <= SKIP:
        return draft_forward(self, tokens, positions, hidden, attn_len, slots, tree_path)
    shapes[(tuple(tokens.shape), tree_path is not None)] += 1
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = draft_forward(self, tokens, positions, hidden, attn_len, slots, tree_path)
    for event in prof.key_averages():
        self_us[event.key] += event.self_cpu_time_total
        counts[event.key] += event.count
    return out


def report() -> None:
    n = calls[0] - SKIP
    print("profiled calls", n, "self total per call ms", sum(self_us.values()) / n / 1e3, dict(shapes))
    for key, us in sorted(self_us.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{key:55s} {us / n:8.1f} us/call  n/call={counts[key] / n:.1f}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        dec.DRAFT_BF16_FORM = sys.argv[1] == "bf16=True"
    eagle.EagleProposer.draft_forward = profiled
    atexit.register(report)
    sys.argv = ["specbench", "logger=none", "baseline=false", "dataset.num_prompts=4", "output_dir=/tmp/profile_draft"]
    runpy.run_module("specbench", run_name="__main__")
