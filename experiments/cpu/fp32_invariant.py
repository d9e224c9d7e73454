"""Side by side in one process: our decoder's float32 forward of SmolLM2-135M (packaged weights, a 300-token prefix,
batch 1) as engine.batch_invariant=auto runs it on a CPU without bf16 matrix units (the fastest product form per row
count, one SDPA call per layer), and as engine.batch_invariant=true does (`DecoderRunner(float32_invariant=True)`:
weights packed by oneDNN, whose float32 product a probe finds row-invariant on this CPU, and attention per query
over exactly its own slots). Prints how many of 24 one-token logit rows 4-token windows reproduce bit for bit, and
the median ms of 1-, 4-, 5- and 8-token forwards (20 rounds, alternating).

    OMP_NUM_THREADS=2 python experiments/cpu/fp32_invariant.py
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PREFIX, ROUNDS, WIDTHS = 300, 20, (1, 4, 5, 8)


def windows_identical(runner: dec.DecoderRunner, tokens: torch.Tensor) -> int:
    """How many of the tokens' logit rows 4-token windows reproduce bit for bit from 1-token forwards."""
    n = tokens.shape[1]
    ones = [runner(tokens[:, i : i + 1], torch.tensor([[PREFIX + i]]), attn_len=PREFIX + 30).logits[0, 0]
            for i in range(n)]
    same = 0
    for w0 in range(0, n, 4):
        out = runner(tokens[:, w0 : w0 + 4], torch.arange(PREFIX + w0, PREFIX + w0 + 4)[None], attn_len=PREFIX + 30)
        same += sum(bool(torch.equal(out.logits[0, j], ones[w0 + j])) for j in range(4))
    return same


def main() -> None:
    torch.manual_seed(0)
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runners = {"auto (fastest form per row count)": dec.DecoderRunner(model),
               "true (oneDNN-packed float32, attention per query)": dec.DecoderRunner(model, float32_invariant=True)}
    prefix = torch.randint(0, 40000, (1, PREFIX))
    for r in runners.values():
        r.allocate(1, 512)
        r(prefix, torch.arange(PREFIX)[None], attn_len=PREFIX)
    tokens = torch.randint(0, 40000, (1, 24))
    identical = {name: windows_identical(r, tokens) for name, r in runners.items()}
    times: dict[tuple[str, int], list[float]] = {(name, n): [] for name in runners for n in WIDTHS}
    for _ in range(ROUNDS):
        for n in WIDTHS:
            x, pos = torch.randint(0, 40000, (1, n)), torch.arange(PREFIX, PREFIX + n)[None]
            for name, r in runners.items():
                start = time.perf_counter()
                r(x, pos, attn_len=PREFIX + 16)
                times[(name, n)].append((time.perf_counter() - start) * 1e3)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median ms per forward of 1 x n tokens")
    cols = " | ".join(f"1 x {n}" for n in WIDTHS)
    print(f"| forward | {cols} | 1 x 4 / 1 x 1 | 4-token windows bit-identical |")
    print("| --- |" + " --- |" * (len(WIDTHS) + 2))
    for name in runners:
        m = {n: statistics.median(times[(name, n)]) for n in WIDTHS}
        cells = " | ".join(f"{m[n]:.1f}" for n in WIDTHS)
        print(f"| {name} | {cells} | {m[4] / m[1]:.2f} | {identical[name]}/24 |")


if __name__ == "__main__":
    main()
