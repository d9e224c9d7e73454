"""float32 on the CPU with `float32_invariant` (engine.batch_invariant=true): the target's products on oneDNN-packed
weights and attention per query, so a token's logits are the same bits alone, inside a verify window and beside
another row; where this CPU's oneDNN float32 product is not row-invariant the runner refuses instead."""

from __future__ import annotations

import pytest
import torch

import specbench.models.decoder as dec
from specbench.models.decoder import DecoderRunner


def _model() -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model("qwen3", num_hidden_layers=2, hidden_size=96, intermediate_size=160,
                               num_attention_heads=3, num_key_value_heads=1, head_dim=32, vocab_size=101,
                               max_position_embeddings=64)
    return AutoModelForCausalLM.from_config(cfg).float().eval()


def _shapes(runner: DecoderRunner) -> list[torch.Tensor]:
    return [runner._w[0][n] for n in ("qkv_w", "o_w", "gu_w", "down_w")] + [runner.lm_head.weight]


def test_float32_invariant_logits_do_not_depend_on_the_window_or_the_batch():
    model = _model()
    if not dec.onednn_row_invariant(_shapes(DecoderRunner(model))):
        with pytest.raises(ValueError, match="not row-invariant"):
            DecoderRunner(model, float32_invariant=True)
        return
    runner = DecoderRunner(model, float32_invariant=True)
    assert runner.cpu_invariant and not DecoderRunner(model).cpu_invariant  # only when asked
    assert not DecoderRunner(model, batch_invariant=False, float32_invariant=True).cpu_invariant
    g = torch.Generator().manual_seed(1)
    prefix, tokens, other = (torch.randint(0, 101, shape, generator=g) for shape in ((1, 7), (1, 8), (1, 11)))
    runner.allocate(2, 40)
    runner(prefix, torch.arange(7)[None], attn_len=7)
    ones = [runner(tokens[:, i : i + 1], torch.tensor([[7 + i]]), attn_len=20).logits[0, 0] for i in range(8)]
    for width in (3, 5):  # verify windows (each rewrites its slots with the same keys and values)
        for start in range(0, 8 - width + 1, width):
            out = runner(tokens[:, start : start + width], 7 + torch.arange(start, start + width)[None], attn_len=20)
            for j in range(width):
                assert torch.equal(out.logits[0, j], ones[start + j]), (width, start + j)
    # beside a second row at other positions (its own prompt first, in cache row 1)
    with runner.narrow(1, 2):
        runner(other, torch.arange(11)[None], attn_len=11)
    pair = torch.cat([tokens[:, 2:5], torch.randint(0, 101, (1, 3), generator=g)])
    positions = torch.stack([7 + torch.arange(2, 5), 11 + torch.arange(3)])
    out = runner(pair, positions, attn_len=20).logits
    for j in range(3):
        assert torch.equal(out[0, j], ones[2 + j]), j


def test_float32_invariant_is_refused_where_the_probe_fails(monkeypatch):
    model = _model()
    monkeypatch.setattr(dec, "_probe_row_invariance", lambda weight: False)
    monkeypatch.setattr(dec, "_ROW_INVARIANT", {})
    with pytest.raises(ValueError, match="not row-invariant on this CPU"):
        DecoderRunner(model, float32_invariant=True)
    assert not DecoderRunner(model).cpu_invariant  # auto: the fast float32 path, no probe needed
