"""Probe (H200), measurement only: silu(gate) * up in the gate/up GEMM's epilogue (`skinny_gemm.GLU_EPILOGUE`, one
kernel fewer per layer) against its own kernel after the GEMM (decode.silu_mul), on our decoder with the invariant
kernels (random weights, bf16, a 256-token prefix). For each model and shape (rows x tokens) it captures one CUDA
graph per setting over the same buffers, times the replays alternately (median of 5 rounds) and compares the logits
bit for bit: the epilogue rounds where the two kernels do, so they must be equal.

    PROBE_MODELS=qwen3-0.6b-random,qwen3-1.7b-random,qwen3-8b-random python3 experiments/gpu/probe_glu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import PREFIX, alternate, capture, run  # noqa: E402

from specbench.kernels import skinny_gemm  # noqa: E402
from specbench.models.decoder import DecoderRunner  # noqa: E402
from specbench.models.loading import load_model, resolve_spec  # noqa: E402

SHAPES = ((1, 1), (1, 4), (64, 1), (64, 2))  # (rows, tokens): a draft pass, a k=3 verify, batch 64's steps
SETTINGS = {"silu_mul kernel": False, "glu epilogue": True}


def probe(name: str, dev: torch.device) -> None:
    model = load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model
    runner = DecoderRunner(model)
    runner.allocate(64, 1024)
    prefix = torch.randint(0, 1000, (64, PREFIX), device=dev)
    runner(prefix, torch.arange(PREFIX, device=dev)[None].expand(64, -1).contiguous(), attn_len=PREFIX)
    for rows, t in SHAPES:
        tokens = torch.randint(0, 1000, (rows, t), device=dev)
        positions = (PREFIX + torch.arange(t, device=dev))[None].expand(rows, -1).contiguous()

        def fwd():
            return runner(tokens, positions, attn_len=PREFIX + t)

        graphs, logits = {}, {}
        for setting, on in SETTINGS.items():
            skinny_gemm.GLU_EPILOGUE = on
            for _ in range(3):  # tune this setting's GEMM configurations outside the capture
                fwd()
            graphs[setting], logits[setting] = capture(fwd)
        times = alternate(graphs)
        same = torch.equal(*logits.values())
        base = times["silu_mul kernel"]
        print(f"{name} {rows}x{t}: " + ", ".join(f"{s} {ms:.3f} ms" for s, ms in times.items())
              + f"; epilogue / kernel {times['glu epilogue'] / base:.3f}; logits bit-identical: {same}", flush=True)
    skinny_gemm.GLU_EPILOGUE = True


if __name__ == "__main__":
    run(probe)
