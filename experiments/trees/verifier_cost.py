"""What the tree verifier costs on the GPU, against the chain's: issue 12 asks for a Triton version if the torch one
costs more than 10% of a step.

Times `Verifier.tree` (a 16-node top-4 tree of depth 4, the tree h200.sh verifies) and `Verifier.__call__` (a k=3
chain) on random logits over Qwen3's vocabulary (151936), at T=0 and T=1, batch 1 and 64, with the torch references
and with the Triton kernels the CLI plugs in on CUDA (engine.triton_verify=auto); median of 50 runs after 10 warm-up
runs, CUDA events around each. The torch tree rows include `tree_layout`, which the engine computes for the verify
forward anyway. The draft's q at T=1 is a random distribution per node, so nearly every first-level child is
rejected: the T>0 kernel makes 4 residual passes and the draw per row, the common worst case.

    python experiments/trees/verifier_cost.py            # on a CUDA machine
"""

from __future__ import annotations

import statistics

import torch

from specbench.run import _acceptance_rules
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
    triton_rules = _acceptance_rules(dev, True)
    print("| verify rule | batch | T | torch ms | Triton ms |")
    print("| --- | --- | --- | --- | --- |")
    for bsz in (1, 64):
        for temp in (0.0, 1.0):
            torch_v = Verifier(SamplingParams(temperature=temp), dev)
            triton_v = Verifier(SamplingParams(temperature=temp), dev, **triton_rules)
            for label, n in (("chain, k=3", 3), ("top-4 tree, depth 4 (16 nodes)", 16)):
                tokens = torch.randint(0, VOCAB, (bsz, n), device=dev, generator=g)
                logits = torch.randn((bsz, n + 1, VOCAB), device=dev, generator=g, dtype=torch.bfloat16)
                q = None if temp == 0 else torch.softmax(torch.randn((bsz, n, VOCAB), device=dev, generator=g), -1)
                parents = topk_parents(4, 4, dev).expand(bsz, -1)
                times = []
                for verifier in (torch_v, triton_v):
                    if n == 3:
                        fn = lambda v=verifier: v(tokens, q, logits)  # noqa: E731
                    else:
                        def fn(v=verifier) -> None:  # what the engine runs around the tree's verify forward
                            v.tree(tokens, parents, q, logits, tree_layout(parents))
                    times.append(_time(fn))
                same = "" if n == 3 or temp > 0 else _same_greedy(torch_v, triton_v, tokens, parents, logits)
                print(f"| {label} | {bsz} | {temp:g} | {times[0]:.3f} | {times[1]:.3f}{same} |", flush=True)


def _same_greedy(torch_v, triton_v, tokens, parents, logits) -> str:
    a = torch_v.tree(tokens, parents, None, logits)
    b = triton_v.tree(tokens, parents, None, logits)
    ok = all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("path", "accepted", "next_token"))
    return "" if ok else " (VERDICTS DIFFER)"


if __name__ == "__main__":
    main()
