"""Probe (H100/H200), measurement only: `engine.fused_mlp`, a layer's MLP (gate/up GEMM, silu_mul, down GEMM) as one
launch with a grid barrier (`skinny_gemm.fused_mlp`, with each of BARRIERS' ways to wait), against the three launches.
For each preset (random weights,
bf16, our decoder, batch-invariant kernels):
- each layer's MLP alone at M = 1 and 4, one launch per layer on that layer's weights inside one graph (so each
  streams from HBM), microseconds per layer, and whether the outputs are bit-identical;
- the whole forward, batch 1 x 1 token and 1 x 4 tokens at a 256-token prefix (a draft pass, a k=3 verify), captured
  once per setting over the same buffers, replays timed alternately (median of 5 rounds), logits compared bit for bit.

    PROBE_MODELS=qwen3-0.6b-random,qwen3-1.7b-random,qwen3-8b-random python3 experiments/gpu/probe_mlp.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import PREFIX, alternate, capture, graph_us, run  # noqa: E402

from specbench.kernels import skinny_gemm  # noqa: E402
from specbench.models.decoder import DecoderRunner  # noqa: E402
from specbench.models.loading import load_model, resolve_spec  # noqa: E402

# the grid barrier's two ways of waiting (skinny_gemm.GRID_POLL): one thread per program polls with an atomic add of
# 0 (the default), or every thread with its own acquire load (no faster on an H200: experiments/gpu/README.md, run 12)
BARRIERS = {"atomic-poll": False, "load-poll": True}
DEFAULT_POLL = skinny_gemm.GRID_POLL  # restored after each A/B


def probe(name: str, dev: torch.device) -> None:
    runner = DecoderRunner(load_model(resolve_spec({"name": name}, "target"), dev, torch.bfloat16).model)
    layers = [(w["gu_w"], w["down_w"]) for w in runner._w]
    for m in (1, 4):
        x = torch.randn(m, layers[0][0].shape[1], device=dev, dtype=torch.bfloat16)
        skinny_gemm.fused_mlp(x, *layers[0])  # the tuner: a candidate, or None where three launches were faster
        cfg = skinny_gemm._MLP_TUNED.get((skinny_gemm._m_bucket(m), x.shape[1], layers[0][1].shape[1]))
        forced = cfg or skinny_gemm._MLP_CANDIDATES[1]  # declined: timed anyway, on this candidate
        pairs = list(range(len(layers)))
        us, same = {"three launches": graph_us(lambda j: skinny_gemm.three_launch_mlp(x, *layers[j]), pairs)}, {}
        for kind, poll in BARRIERS.items():
            skinny_gemm.GRID_POLL = poll
            same[kind] = all(torch.equal(skinny_gemm.fused_mlp(x, g, d, config=forced),
                                         skinny_gemm.three_launch_mlp(x, g, d)) for g, d in layers[:4])
            us[f"one launch, {kind}"] = graph_us(lambda j: skinny_gemm.fused_mlp(x, *layers[j], config=forced), pairs)
        skinny_gemm.GRID_POLL = DEFAULT_POLL
        print(f"{name} MLP alone, M={m}, us/layer: " + ", ".join(f"{k} {v:.2f} ({v / us['three launches']:.3f})"
                                                              for k, v in us.items())
              + f"; with {forced}; the tuner chose {cfg or 'three launches'}; bit-identical: {same}", flush=True)
    runner.allocate(1, 1024)
    runner(torch.randint(0, 1000, (1, PREFIX), device=dev), torch.arange(PREFIX, device=dev)[None], attn_len=PREFIX)
    for t in (1, 4):
        tokens = torch.randint(0, 1000, (1, t), device=dev)
        positions = (PREFIX + torch.arange(t, device=dev))[None]

        def fwd():
            return runner(tokens, positions, attn_len=PREFIX + t)

        graphs, logits = {}, {}
        for label, on, poll in (("three", False, True), *(("one, " + k, True, p) for k, p in BARRIERS.items())):
            skinny_gemm.use_fused_mlp(on)
            skinny_gemm.GRID_POLL = poll
            for _ in range(3):  # tuning and compiles outside the capture
                fwd()
            graphs[label], logits[label] = capture(fwd)
        skinny_gemm.use_fused_mlp(True)
        skinny_gemm.GRID_POLL = DEFAULT_POLL
        times = alternate(graphs)
        same = all(torch.equal(logits["three"], v) for v in logits.values())
        print(f"{name} forward 1 x {t}, graph replay ms: " + ", ".join(f"{k} {v:.3f} ({v / times['three']:.3f})"
                                                                      for k, v in times.items())
              + f"; logits bit-identical: {same}", flush=True)
        del graphs


if __name__ == "__main__":
    run(probe)
