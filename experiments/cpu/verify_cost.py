"""The CPU default's target forwards in float32 with "auto"'s product forms (timed first, as the CLI's warm-up does),
at a 300-token prefix: a 1-token step, a 5-token chain forward and a 5-node tree verify (the default tree's width:
root + 4 nodes), in turns, 10 rounds of 3 (ms per forward); then, with "profile", torch.profiler's table for 5 of the
1-token and 5 of the tree forwards, and the forms "auto" picked.

    OMP_NUM_THREADS=2 python experiments/cpu/verify_cost.py profile
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import specbench.models.decoder as dec
from specbench.kernels.decode_ref import tree_paths
from specbench.models.loading import load_model, resolve_spec

PREFIX = 300
PARENTS = [-1, 0, 0, 1, 1]  # the root, its two children, two grandchildren under the first


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    runner.allocate(1, 512)
    print("timed forms:", dec.time_cpu_forms(runner))
    with torch.inference_mode():
        runner(torch.randint(0, 40000, (1, PREFIX)), torch.arange(PREFIX)[None], attn_len=PREFIX)
        n = len(PARENTS)
        sees = torch.eye(n, dtype=torch.bool)  # node i sees its ancestors and itself
        for i, parent in enumerate(PARENTS):
            if parent >= 0:
                sees[i] |= sees[parent]
        slots = torch.arange(PREFIX, PREFIX + n)[None]
        tree_path = tree_paths(sees[None], slots)
        tree_pos = PREFIX + sees[None].sum(-1) - 1
        tokens = torch.randint(0, 40000, (1, n))
        forwards = {
            "1 token": lambda: runner(tokens[:, :1], torch.tensor([[PREFIX]]), attn_len=PREFIX + 1),
            "5-token chain": lambda: runner(tokens, torch.arange(PREFIX, PREFIX + 5)[None], attn_len=PREFIX + 5),
            "5-node tree": lambda: runner(tokens, tree_pos, attn_len=PREFIX + n, slots=slots, tree_path=tree_path),
        }
        for f in forwards.values():
            f(), f()
        ms: dict[str, list[float]] = {name: [] for name in forwards}
        for _ in range(10):
            for name, f in forwards.items():
                t0 = time.perf_counter()
                f(), f(), f()
                ms[name].append((time.perf_counter() - t0) / 3 * 1e3)
        for name, m in ms.items():
            print(f"{name}: median {statistics.median(m):.1f} min {min(m):.1f} ms")
        if "profile" in sys.argv[1:]:
            from torch.profiler import profile

            for name in ("1 token", "5-node tree"):
                with profile() as prof:
                    for _ in range(5):
                        forwards[name]()
                print(name)
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
    print(dec.cpu_form_choices())


if __name__ == "__main__":
    main()
