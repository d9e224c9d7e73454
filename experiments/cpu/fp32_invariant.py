"""import statistics, time, torch
import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec
torch.manual_seed(0)
model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
fast = dec.DecoderRunner(model)
inv = dec.DecoderRunner(model)
inv.cpu_invariant = True
inv._wp = [{**w, **{n: dec._pack_bf16(w[n]) for n in ("qkv_w", "o_w", "gu_w", "down_w")}} for w in inv._w]
inv._head_p = dec._pack_bf16(inv.lm_head.weight)
P = 300
prefix = torch.randint(0, 40000, (1, P))
for r in (fast, inv):
    r.allocate(1, 512); r(prefix, torch.arange(P)[None], attn_len=P)
# bit-identity: 24 tokens one at a time vs 4-token windows
toks = torch.randint(0, 40000, (1, 24))
for name, r in (("fast", fast), ("inv", inv)):
    ones = [r(toks[:, i:i+1], torch.tensor([[P + i]]), attn_len=P + 30).logits[0, 0] for i in range(24)]
    same = 0
    for w0 in range(0, 24, 4):
        out = r(toks[:, w0:w0+4], torch.arange(P + w0, P + w0 + 4)[None], attn_len=P + 30).logits[0]
        same += sum(torch.equal(out[j], ones[w0 + j]) for j in range(4))
    print(name, "bit-identical", same, "/ 24")
def t(r, n):
    x = torch.randint(0, 40000, (1, n)); pos = torch.arange(P, P + n)[None]
    t0 = time.perf_counter(); r(x, pos, attn_len=P + 16); return (time.perf_counter() - t0) * 1e3
res = {(nm, n): [] for nm in ("fast", "inv") for n in (1, 4, 5, 8)}
for rep in range(20):
    for n in (1, 4, 5, 8):
        for nm, r in (("fast", fast), ("inv", inv)):
            res[(nm, n)].append(t(r, n))
for nm in ("fast", "inv"):
    m = {n: statistics.median(res[(nm, n)]) for n in (1, 4, 5, 8)}
    print(nm, " ".join(f"1x{n} {m[n]:.1f}" for n in m), f" r4 {m[4]/m[1]:.2f} r8 {m[8]/m[1]:.2f}")
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PREFIX, ROUNDS, WIDTHS = 300, 20, (1, 4, 5, 8)


def invariant_copy(runner: dec.DecoderRunner) -> dec.DecoderRunner:
    """The same model with the CPU bf16 path's invariant forward switched on in float32 (oneDNN-packed weights)."""
    runner.cpu_invariant = True
    runner._wp = [{**w, **{n: dec._pack_bf16(w[n]) for n in ("qkv_w", "o_w", "gu_w", "down_w")}} for w in runner._w]
    runner._head_p = dec._pack_bf16(runner.lm_head.weight)
    return runner


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
    runners = {"today (fastest form per row count)": dec.DecoderRunner(model),
               "invariant (oneDNN-packed float32, attention per query)": invariant_copy(dec.DecoderRunner(model))}
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
