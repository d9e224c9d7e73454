"""Probe (H200), measurement only: where issue 9's batch-64 run spends its time (frontdoor.sh block 3: 8B + 0.6B,
k=1, 64 rows of the mixed-128 prompts, ~30-100 tokens). frontdoor-run7/b64-8b.txt: TTFT ~670 ms for a 64-row
prefill, the draft's own prefill of the same prompts ~100 ms (the first ITL of every row, ITL p99), a verify of 2
tokens a row 8.39 ms against a 1-token step's 6.49 (invariant kernels).
For Qwen3-0.6B and Qwen3-8B (random weights, bf16, our decoder), with the batch-invariant kernels and with the
fastest (cuBLAS) ones: the 64-row prefill of 100 tokens a row (eager, as the engine runs it) and a decode forward
of 64 rows x 1 and x 2 tokens at a 100-token prefix (replayed from a CUDA graph); then the kernels that take the
most GPU time in each prefill and in the 2-token forward (torch.profiler).

    python3 experiments/gpu/probe_batch64.py > $OUT/probe_batch64.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import alternate, capture, kernel_times, run  # noqa: E402

from specbench.models.decoder import DecoderRunner  # noqa: E402
from specbench.models.loading import load_model, resolve_spec  # noqa: E402

ROWS, PROMPT = 64, 100
KERNELS = {"invariant": True, "fastest": False}


def top_kernels(fn, label: str, n: int = 8) -> None:
    by_name, count = kernel_times(fn)
    print(f"  {label}: kernels {sum(by_name.values()) / 1e3:.3f} ms in {count}", flush=True)
    for kname, us in by_name.most_common(n):
        print(f"      {us / 1e3:.3f} ms  {kname}", flush=True)


def probe(name: str, dev: torch.device) -> None:
    model = load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model
    tokens = torch.randint(0, 1000, (ROWS, PROMPT), device=dev)
    positions = torch.arange(PROMPT, device=dev).expand(ROWS, PROMPT)
    last = torch.full((ROWS, 1), PROMPT - 1, device=dev)
    for label, invariant in KERNELS.items():
        runner = DecoderRunner(model, batch_invariant=invariant)  # engine.batch_invariant
        runner.allocate(ROWS, 512)
        prefill = lambda: runner(tokens, positions, attn_len=PROMPT, logits_at=last)  # noqa: E731
        prefill()
        torch.cuda.synchronize()
        ms = do_bench(prefill, warmup=2, rep=20, return_mode="median")
        print(f"{name} [{label}]: prefill {ROWS} x {PROMPT} eager {ms:.1f} ms", flush=True)
        top_kernels(prefill, "prefill")
        graphs = {}
        for t in (1, 2):
            step = torch.randint(0, 1000, (ROWS, t), device=dev)
            pos = PROMPT + torch.arange(t, device=dev).expand(ROWS, t)
            fwd = lambda step=step, pos=pos: runner(step, pos, attn_len=PROMPT + 4)  # noqa: E731
            for _ in range(3):  # tunes outside the capture
                fwd()
            graphs[f"{ROWS} x {t}"], _ = capture(fwd)
            if t == 2:
                top_kernels(fwd, f"eager {ROWS} x 2 forward")
        times = alternate(graphs)
        print(f"{name} [{label}]: graph replay " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()), flush=True)
        graphs.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    run(probe)
