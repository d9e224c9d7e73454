"""The CPU default's target forwards in float32 with "auto"'s product forms (timed first, as the CLI's warm-up does),
at a 300-token prefix: a 1-token step, a 5-token chain forward and a 5-node tree verify (the default tree's width:
root + 4 nodes), in turns, 10 rounds of 3 (ms per forward); then, with "profile", torch.profiler's table for 5 of the
1-token and 5 of the tree forwards, and the forms "auto" picked.

    OMP_NUM_THREADS=2 python experiments/cpu/verify_cost.py profile
"""

from __future__ import annotations

import statistics
import sys

import torch
from bench_tree_verify import PREFIX, forwards_at, time_in_turns  # this script's folder is on sys.path

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PARENTS = [-1, 0, 0, 1, 1]  # the root, its two children, two grandchildren under the first


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    runner.allocate(1, 512)
    print("timed forms:", dec.time_cpu_forms(runner))
    with torch.inference_mode():
        runner(torch.randint(0, 40000, (1, PREFIX)), torch.arange(PREFIX)[None], attn_len=PREFIX)
        forwards = forwards_at(runner, PARENTS, chain=5)
        for name, m in time_in_turns(forwards, rounds=10).items():
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
