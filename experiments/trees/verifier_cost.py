"""What the torch tree verifier costs on the GPU, against the chain's: issue 12 asks for a Triton version only if
the torch one costs more than 10% of a step.

Times `verify.tree_layout` + `Verifier.tree` (a 16-node top-4 tree of depth 4, the tree h200.sh verifies) and
`Verifier.__call__` (a k=3 chain) on random logits over Qwen3's vocabulary (151936), at T=0 and T=1, batch 1 and
64; median of 50 runs after 10 warm-up runs, CUDA events around each. The draft's q at T=1 is a random
distribution per node.

    python experiments/trees/verifier_cost.py            # on a CUDA machine
"""

from __future__ import annotations

import statistics

import torch

from specbench.strategies.trees import topk_parents
from specbench.verify import SamplingParams, Verifier, tree_layout

VOCAB = 151936


def _time(fn, reps: int = 50, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    print("| verify rule | batch | T | ms |")
    print("| --- | --- | --- | --- |")
    for bsz in (1, 64):
        for temp in (0.0, 1.0):
            verifier = Verifier(SamplingParams(temperature=temp), dev)
            for label, n in (("chain, k=3", 3), ("top-4 tree, depth 4 (16 nodes)", 16)):
                tokens = torch.randint(0, VOCAB, (bsz, n), device=dev, generator=g)
                logits = torch.randn((bsz, n + 1, VOCAB), device=dev, generator=g, dtype=torch.bfloat16)
                q = None if temp == 0 else torch.softmax(torch.randn((bsz, n, VOCAB), device=dev, generator=g), -1)
                if n == 3:
                    fn = lambda: verifier(tokens, q, logits)  # noqa: E731
                else:
                    parents = topk_parents(4, 4, dev).expand(bsz, -1)

                    def fn() -> None:  # what the engine runs around the tree's verify forward
                        tree_layout(parents)
                        verifier.tree(tokens, parents, q, logits)
                print(f"| {label} | {bsz} | {temp:g} | {_time(fn):.3f} |", flush=True)


if __name__ == "__main__":
    main()
