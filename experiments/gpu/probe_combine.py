"""Probe (H200), measurement only, for `patches/fused-attention-combine.patch` (apply it first): the split decode
attention's combine done by the last program of each tile (`decode.FUSED_COMBINE`) against the separate
`_attn_combine_kernel` launch. For each preset (random weights, bf16, our decoder, batch-invariant kernels), two
forwards: batch 1 x 1 token at a 256-token prefix (a draft pass or a target step) and 64 rows x 2 tokens at a
100-token prefix (a batch-64 verify at k=1). Each is captured twice over the same buffers, once per setting, the
replays timed alternately (median of 5 rounds), and the logits compared bit for bit.

    git apply experiments/gpu/patches/fused-attention-combine.patch
    python3 experiments/gpu/probe_combine.py > $OUT/probe_combine.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import alternate, capture, one_token_forward, run  # noqa: E402

from specbench.kernels import decode  # noqa: E402
from specbench.models.decoder import DecoderRunner  # noqa: E402
from specbench.models.loading import load_model, resolve_spec  # noqa: E402

ROWS, TOKENS, PROMPT = 64, 2, 100


def batch_forward(name: str, dev: torch.device):
    """ROWS rows x TOKENS new tokens at a PROMPT-token prefix."""
    runner = DecoderRunner(load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model)
    runner.allocate(ROWS, 512)
    runner(torch.randint(0, 1000, (ROWS, PROMPT), device=dev), torch.arange(PROMPT, device=dev).expand(ROWS, -1),
           attn_len=PROMPT)
    tokens = torch.randint(0, 1000, (ROWS, TOKENS), device=dev)
    positions = (PROMPT + torch.arange(TOKENS, device=dev)).expand(ROWS, -1).contiguous()
    return lambda: runner(tokens, positions, attn_len=PROMPT + TOKENS)


def probe(name: str, dev: torch.device) -> None:
    if not hasattr(decode, "FUSED_COMBINE"):
        raise SystemExit("decode.FUSED_COMBINE is missing: apply experiments/gpu/patches/fused-attention-combine.patch")
    for label, make in (("1 x 1", one_token_forward), (f"{ROWS} x {TOKENS}", batch_forward)):
        fwd = make(name, dev)
        for _ in range(3):  # tuning and compiles outside the captures
            fwd()
        graphs, logits = {}, {}
        for fused in (False, True):
            decode.FUSED_COMBINE = fused
            graphs[fused], logits[fused] = capture(fwd)
        times = alternate({"separate": graphs[False], "fused": graphs[True]})
        same = torch.equal(logits[False], logits[True])
        print(f"{name} {label}: graph replay separate combine {times['separate']:.3f} ms, fused {times['fused']:.3f} ms "
              f"({times['fused'] / times['separate']:.3f}); logits bit-identical: {same}", flush=True)
        del graphs, fwd
        torch.cuda.empty_cache()
    decode.FUSED_COMBINE = True


if __name__ == "__main__":
    run(probe)  # PROBE_MODELS=qwen3-0.6b-random,qwen3-8b-random (the default), add qwen3-1.7b-random for the 32B's draft
