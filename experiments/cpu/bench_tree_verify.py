"""Our decoder's bf16 `cpu_invariant` forward of SmolLM2-135M (packaged weights) at a 300-token prefix: a 1-token
forward, a 4-token chain verify and a 9-node tree verify, alternating, median ms per forward.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_tree_verify.py            # add "profile" for torch.profiler's table
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch

import specbench.models.decoder as dec
from specbench.kernels.decode_ref import tree_paths
from specbench.models.loading import load_model, resolve_spec

PREFIX = 300
PARENTS = [-1, 0, 0, 0, 0, 1, 1, 5, 7]  # node i's parent: the root, four children, then a branch to depth 4


def forwards_at(runner: dec.DecoderRunner, parents: list[int], chain: int) -> dict[str, Callable[[], object]]:
    """A 1-token step, a `chain`-token chain forward and a tree verify of `parents` (node i's parent, parents before
    children; -1 the root) after the PREFIX-token prefix already in `runner`'s cache."""
    n = len(parents)
    sees = torch.eye(n, dtype=torch.bool)  # node i sees its ancestors and itself (parents come before children)
    for i, parent in enumerate(parents):
        if parent >= 0:
            sees[i] |= sees[parent]
    slots = torch.arange(PREFIX, PREFIX + n)[None]
    tree_path = tree_paths(sees[None], slots)
    tree_pos = PREFIX + sees[None].sum(-1) - 1  # the root's position plus the node's depth
    tokens = torch.randint(0, 40000, (1, max(n, chain)))
    return {
        "1 token": lambda: runner(tokens[:, :1], torch.tensor([[PREFIX]]), attn_len=PREFIX + 1),
        f"{chain}-token chain": lambda: runner(tokens[:, :chain], torch.arange(PREFIX, PREFIX + chain)[None],
                                               attn_len=PREFIX + chain),
        f"{n}-node tree": lambda: runner(tokens[:, :n], tree_pos, attn_len=PREFIX + n, slots=slots, tree_path=tree_path),
    }


def time_in_turns(forwards: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """ms per forward, each round every forward 3 times in turn (after two untimed calls each)."""
    for f in forwards.values():
        f(), f()
    ms: dict[str, list[float]] = {name: [] for name in forwards}
    for _ in range(rounds):
        for name, f in forwards.items():
            t0 = time.perf_counter()
            f(), f(), f()
            ms[name].append((time.perf_counter() - t0) / 3 * 1e3)
    return ms


def main() -> None:
    torch.manual_seed(0)
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.bfloat16).model
    runner = dec.DecoderRunner(model)
    assert runner.cpu_invariant, "this CPU has no oneDNN bf16 GEMMs"
    runner.allocate(1, 512)
    runner(torch.randint(0, 40000, (1, PREFIX)), torch.arange(PREFIX)[None], attn_len=PREFIX)
    forwards = forwards_at(runner, PARENTS, chain=4)
    for name, m in time_in_turns(forwards, rounds=8).items():
        print(f"{name}: {statistics.median(m):.1f} ms")
    if sys.argv[1:] == ["profile"]:
        from torch.profiler import profile
        with profile() as prof:
            for _ in range(3):
                forwards[f"{len(PARENTS)}-node tree"]()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
