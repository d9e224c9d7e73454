"""Side by side in one run: our decoder's CPU forward of SmolLM2-135M (packaged weights) in four settings, and whether
a verify forward's logits are bit-identical to 1-token forwards of the same tokens.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_forward.py

- fp32 "auto" (`decoder.LINEAR_WT_ROWS = "auto"`, the default: per weight shape and row count 1..8, the fastest of
  F.linear, `weight @ x.T` and `weight @ x.T` on one zero row more, timed with weights streaming from memory);
- fp32 with `weight @ x.T` for 2..8 rows (`decoder.LINEAR_WT_ROWS = (2, 8)`, the default until 2026-12-02), SDPA
  with a mask;
- fp32, F.linear everywhere (`decoder.LINEAR_WT_ROWS = None`, the fp32 default for a day after);
- bf16, batch_invariant=false: F.linear (oneDNN, unpacked weights) and SDPA with a mask;
- bf16, batch_invariant=true (`DecoderRunner.cpu_invariant`, engine.dtype=auto's choice on such a CPU): packed oneDNN
  weights (packed for decoder.ONEDNN_PACK_ROWS rows), attention per query. Left out (and said so) on a CPU without
  bf16 matrix units, where that path does not exist.
Each (batch x new tokens) shape is timed in ROUNDS rounds of 3 forwards per setting, the settings alternating
round by round at a prefix of 300 tokens; prints the median ms per forward. "bit-identical" decodes 24 tokens one
at a time and recomputes them in 4-token windows: how many of the 24 logit rows are equal bit for bit.
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

ROUNDS = 8
SHAPES = ((1, 1), (1, 4), (1, 5), (1, 8), (4, 4))


def identical_in_windows(runner: dec.DecoderRunner, prompt: torch.Tensor, steps: int = 24, window: int = 4) -> int:
    n = prompt.shape[1]
    runner.allocate(1, 512)
    out = runner(prompt, torch.arange(n)[None], attn_len=n)
    seq, single, nxt = [], [], int(out.logits[0, -1].argmax())
    for p in range(n, n + steps):
        o = runner(torch.tensor([[nxt]]), torch.tensor([[p]]), attn_len=p + 1)
        single.append(o.logits[0, -1].clone())
        seq.append(nxt)
        nxt = int(o.logits[0, -1].argmax())
    same = 0
    for s in range(0, steps, window):
        positions = torch.arange(n + s, n + s + window)[None]
        o = runner(torch.tensor([seq[s : s + window]]), positions, attn_len=n + s + window)
        same += sum(bool(torch.equal(o.logits[0, j], single[s + j])) for j in range(window))
    return same


def main() -> None:
    spec = resolve_spec({"name": "smollm2-135m"}, "target")
    fp32 = load_model(spec, torch.device("cpu"), torch.float32).model
    bf16 = load_model(spec, torch.device("cpu"), torch.bfloat16).model
    settings = {
        "fp32 auto (the default since 2026-12-03)": (dec.DecoderRunner(fp32), "auto"),
        "fp32 weight @ x.T (2..8 rows)": (dec.DecoderRunner(fp32), (2, 8)),
        "fp32 F.linear": (dec.DecoderRunner(fp32), None),
        "bf16 plain": (dec.DecoderRunner(bf16, batch_invariant=False), None),
        "bf16 invariant": (dec.DecoderRunner(bf16), None),
    }
    if not settings["bf16 invariant"][0].cpu_invariant:  # no AMX / AVX512-BF16 (an AVX2 CPU): no such path to time
        print("this CPU has no oneDNN bf16 GEMMs (DecoderRunner.cpu_invariant is false): 'bf16 invariant' left out")
        del settings["bf16 invariant"]
    default_rows = dec.LINEAR_WT_ROWS
    prompt = torch.randint(0, 40000, (1, 40), generator=torch.Generator().manual_seed(0))
    times: dict[tuple[str, int, int], list[float]] = {}
    same: dict[str, int] = {}
    try:
        for name, (runner, rows) in settings.items():
            dec.LINEAR_WT_ROWS = rows
            same[name] = identical_in_windows(runner, prompt)
        for b, t in SHAPES:
            tokens = torch.randint(0, 40000, (b, t))
            positions = torch.arange(300, 300 + t)[None].expand(b, t)
            for runner, _ in settings.values():
                runner.allocate(4, 512)
            for _ in range(ROUNDS):
                for name, (runner, rows) in settings.items():
                    dec.LINEAR_WT_ROWS = rows
                    runner(tokens, positions, attn_len=300 + t)  # warm
                    t0 = time.perf_counter()
                    for _ in range(3):
                        runner(tokens, positions, attn_len=300 + t)
                    times.setdefault((name, b, t), []).append((time.perf_counter() - t0) / 3 * 1e3)
    finally:
        dec.LINEAR_WT_ROWS = default_rows
    print(f"torch {torch.__version__}, threads: {torch.get_num_threads()}")
    head = " | ".join(f"{b} x {t} ms" for b, t in SHAPES)
    print(f"| setting | {head} | 1 x 4 / 1 x 1 | 4-token windows bit-identical to 1-token forwards |")
    print("|---" * (len(SHAPES) + 3) + "|")
    for name in settings:
        ms = [statistics.median(times[(name, b, t)]) for b, t in SHAPES]
        cells = " | ".join(f"{m:.1f}" for m in ms)
        print(f"| {name} | {cells} | {ms[1] / ms[0]:.2f} | {same[name]}/24 |")


if __name__ == "__main__":
    main()
