"""TransformersRunner's batch-1 chain path: transformers' KV cache, cut back on every rollback, equals a full recompute."""

from __future__ import annotations

import pytest
import torch

from specbench.models.runner import TransformersRunner


def _model(model_type: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
                head_dim=16, vocab_size=101, max_position_embeddings=512, tie_word_embeddings=False)
    if model_type == "gemma3_text":  # sliding-window layers (window 4) around a full-attention one
        arch.update(sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **arch)).eval()


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text"])
def test_batch_one_chains_over_the_kv_cache_equal_a_full_recompute(model_type):
    model = _model(model_type)
    runner = TransformersRunner(model)
    runner.allocate(1, 40)
    seq = torch.randint(0, 101, (40,), generator=torch.Generator().manual_seed(3))
    # (first position, tokens fed): a prefill, verify windows that roll back (to 8 after 6..9, to 7 after 8..10, to 12
    # after 11..13), a single token, and windows far past the sliding window
    calls = [(0, 7), (6, 4), (8, 3), (7, 4), (11, 2), (13, 1), (12, 5), (17, 12)]
    for p0, t in calls:
        positions = torch.arange(p0, p0 + t)[None]
        out = runner(seq[None, p0 : p0 + t], positions, attn_len=p0 + t, want_hidden=True)
        with torch.no_grad():
            full = model(seq[None, : p0 + t], use_cache=False, output_hidden_states=True)
        torch.testing.assert_close(out.logits, full.logits[:, p0:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.hidden, full.hidden_states[-1][:, p0:], atol=1e-5, rtol=1e-5)
        assert runner.cache is not None and runner.cached == p0 + t
    last = torch.tensor([[1]])  # logits_at: a column of the fed tokens
    out = runner(seq[None, 29:32], torch.arange(29, 32)[None], attn_len=32, logits_at=last)
    with torch.no_grad():
        torch.testing.assert_close(out.logits[:, 0], model(seq[None, :31], use_cache=False).logits[:, -1], atol=1e-5, rtol=1e-5)


def test_other_calls_recompute_and_drop_the_cache():
    model = _model("llama")
    runner = TransformersRunner(model)
    runner.allocate(1, 20)
    seq = torch.randint(0, 101, (20,), generator=torch.Generator().manual_seed(4))
    runner(seq[None, :6], torch.arange(6)[None], attn_len=6)
    out = runner(seq[None, [0, 6]], torch.tensor([[0, 6]]), attn_len=7)  # not consecutive: a full recompute
    assert runner.cache is None
    with torch.no_grad():
        torch.testing.assert_close(out.logits[:, 1], model(seq[None, :7], use_cache=False).logits[:, -1], atol=1e-5, rtol=1e-5)
    runner.allocate(2, 20)  # batch 2: the recompute path
    out = runner(seq[None, :5].expand(2, -1), torch.arange(5).expand(2, -1), attn_len=5)
    assert runner.cache is None and out.logits.shape == (2, 5, 101)
