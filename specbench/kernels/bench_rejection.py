"""Time the torch reference of the acceptance step against the Triton kernels (needs a CUDA GPU).

    python -m specbench.kernels.bench_rejection [--vocab 151936]

Every configuration is first checked for bit-identical verdicts on fresh noise. The table then
gives two medians per implementation, in microseconds: "eager" calls from Python
(triton.testing.do_bench, L2 flushed between runs; includes launch overhead, which dominates the
kernels' small work) and "graph" replays one CUDA graph (triton.testing.do_bench_cudagraph; the
device time an engine that captures its decode step would see).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from specbench import verify

BATCHES = (1, 8, 64)
DRAFT_LENS = (3, 5)
DTYPES = (torch.bfloat16, torch.float32)
MODES = ("greedy", "rejection", "one_hot")  # one_hot: rejection sampling with draft_probs=None


def _inputs(mode: str, bsz: int, k: int, vocab: int, dtype: torch.dtype, g: torch.Generator) -> tuple:
    dev = torch.device("cuda")
    z = torch.randn(bsz, k + 1, vocab, device=dev, generator=g) * 2  # [B, K+1, V]
    draft_logits = z[:, :k] + torch.randn(bsz, k, vocab, device=dev, generator=g)  # [B, K, V], close to z
    q = torch.softmax(draft_logits, -1)
    draft = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(bsz, k)  # [B, K]
    if mode == "greedy":
        draft = torch.where(torch.rand(bsz, k, device=dev, generator=g) < 0.7, z[:, :k].argmax(-1), draft)
        return draft, z.to(dtype)
    u = torch.rand(bsz, k, device=dev, dtype=torch.float64, generator=g)  # [B, K]
    e = torch.empty(bsz, vocab, device=dev).exponential_(generator=g)  # [B, V]
    q = None if mode == "one_hot" else q.to(dtype)
    return draft, q, torch.softmax(z, -1).to(dtype), u, e


def _us(fn: Callable[[], object]) -> tuple[float, float]:
    """(eager, graph) median microseconds of fn()."""
    import triton.testing

    eager = triton.testing.do_bench(fn, return_mode="median")
    try:
        graph = triton.testing.do_bench_cudagraph(fn, return_mode="median")
    except RuntimeError:  # not capturable (the reference's one-hot path copies a CPU scalar)
        graph = float("nan")
    return eager * 1e3, graph * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit(
            "bench_rejection needs a CUDA GPU and torch.cuda.is_available() is False here; "
            "on the CPU run the kernels' equality tests instead: TRITON_INTERPRET=1 pytest tests/kernels"
        )
    from specbench.kernels import rejection

    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, V={args.vocab}, median microseconds: eager | CUDA graph")
    head = f"{'mode':<10} {'dtype':<9} {'B':>3} {'K':>2} {'exact':>5}"
    print(f"{head} {'torch':>7} {'triton':>7} {'ratio':>6} | {'torch':>7} {'triton':>7} {'ratio':>6}")
    inexact = 0
    for mode in args.modes:
        ref, ker = (
            (verify.greedy_verify, rejection.greedy_verify_triton)
            if mode == "greedy"
            else (verify.rejection_sample, rejection.rejection_sample_triton)
        )
        for dtype in DTYPES:
            for bsz in BATCHES:
                for k in DRAFT_LENS:
                    x = _inputs(mode, bsz, k, args.vocab, dtype, g)
                    want, got = ref(*x), ker(*x)
                    exact = torch.equal(want.accepted, got.accepted) and torch.equal(want.next_token, got.next_token)
                    inexact += not exact
                    (e_ref, g_ref), (e_ker, g_ker) = _us(lambda: ref(*x)), _us(lambda: ker(*x))
                    name = str(dtype).removeprefix("torch.")
                    print(
                        f"{mode:<10} {name:<9} {bsz:>3} {k:>2} {'yes' if exact else 'NO':>5} "
                        f"{e_ref:>7.1f} {e_ker:>7.1f} {e_ref / e_ker:>5.1f}x | "
                        f"{g_ref:>7.1f} {g_ker:>7.1f} {g_ref / g_ker:>5.1f}x".replace("nan", "n/a")
                    )
    if inexact:
        raise SystemExit(f"{inexact} configurations gave verdicts that differ from the reference")


if __name__ == "__main__":
    main()
