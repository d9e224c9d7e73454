"""Probe (GPU), a check: the bfloat16 distillation writer's features through CUDA graphs against the same writer
eagerly, with target-only's run-ahead off (as specbench.train.data runs it since 8a80e70) and on (as the engine ran it
before: the next step's forward replayed ahead of the recorder's commit). 64 random prompts of 20-59 tokens,
SmolLM2-135M's architecture with random weights, 16 new tokens, greedy, layers 2 and 15 recorded.

    python3 experiments/drafters/probe_features_ahead.py
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch

from specbench.engine import Engine
from specbench.models.loading import load_model, resolve_spec
from specbench.train.data import data_writer, generate_distillation


def main() -> None:
    dev = torch.device("cuda")
    target = load_model(resolve_spec({"name": "smollm2-135m-random"}, "target"), dev, torch.float32)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(300, 40000, (int(n),), generator=g).tolist() for n in torch.randint(20, 60, (64,), generator=g)]
    writer, runner = data_writer(target, torch.bfloat16)
    opts = dict(max_new_tokens=16, samples=1, temperature=0.7, batch_size=64, layers=(2, 15), eos_ids=set(), seed=0,
                progress=False)
    eager = generate_distillation(writer, runner.runner, prompts, **opts)
    for ahead in (False, True):
        if ahead:  # whatever generate_distillation sets, the engines run ahead
            real = Engine.__setattr__
            patch = mock.patch.object(Engine, "__setattr__",
                                      lambda self, k, v: real(self, k, True if k == "target_runs_ahead" else v))
        else:
            patch = contextlib.nullcontext()
        with patch:
            graphed = generate_distillation(writer, runner, prompts, **opts)
        toks = sum(torch.equal(a, b) for a, b in zip(graphed.tokens, eager.tokens))
        worst = max(float((a.float() - b.float()).abs().max()) for a, b in zip(graphed.hidden, eager.hidden))
        worst_l = max(float((a.float() - b.float()).abs().max()) for a, b in zip(graphed.layer_hidden, eager.layer_hidden))
        top1 = sum(int((a != b).sum()) for a, b in zip(graphed.top1, eager.top1))
        print(f"run-ahead {'on' if ahead else 'off'}: tokens {toks}/64 identical; features max |diff| final {worst:.3g}, "
              f"layers {worst_l:.3g}; top-1 differing at {top1} positions", flush=True)


if __name__ == "__main__":
    main()
