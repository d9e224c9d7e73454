"""draft_model for VLM targets: greedy equality with transformers' generate for a text draft with a
smaller vocabulary and for a VLM draft (batch 1 and a batch mixing image, two-image and text-only
prompts), the text draft's own sequential positions, and the refused combinations."""

from __future__ import annotations

import pytest
import torch
import tiny_vlm as tv

from specbench.errors import ConfigError
from specbench.models.decoder import DecoderRunner
from specbench.models.draft_runner import raise_if_tokenizers_disagree
from specbench.models.multimodal import VLMRunner
from specbench.strategies.draft_model import DraftModelProposer

KINDS = ["qwen2_5_vl", "qwen3_vl"]


def _drafts(target):
    return {"text draft, smaller vocabulary": tv.text_draft_from(target, noise=0.2),
            "vlm draft": tv.perturbed_vlm(target, 0.3)}


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_output_equals_the_targets_generate(kind):
    target = tv.vlm(kind)
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    expected = [tv.hf_greedy(target.model, i, m, 16) for i, m in zip(ids, mms)]
    for name, draft in _drafts(target).items():
        ctx = tv.context(target, draft)
        for k, batch_size in ((1, 3), (3, 3), (3, 1)):
            prop = tv.draft_proposer(ctx, k)
            rows = tv.decode(ctx, prop, ids, mms, batch_size, 16)
            assert [r.output_ids for r in rows] == expected, f"{name} k={k} batch={batch_size}"
            assert 0 < sum(r.accepted_tokens for r in rows) < sum(r.draft_tokens for r in rows), name
        runner = prop.runner.runner
        assert isinstance(runner, VLMRunner if name == "vlm draft" else DecoderRunner)


def test_a_larger_draft_vocabulary_is_refused():
    target = tv.vlm()
    ctx = tv.context(target, tv.text_draft(vocab=tv.TARGET_VOCAB + 1))
    with pytest.raises(ConfigError, match=r"vocabulary of 212 entries, larger than target .*211.*allowed: a draft vocabulary <= the target's"):
        DraftModelProposer(ctx, k=3)
    tv.draft_proposer(tv.context(target, tv.text_draft(vocab=tv.TARGET_VOCAB)), 3)  # equal is fine


def test_tokenizers_that_disagree_on_a_shared_id_are_refused():
    raise_if_tokenizers_disagree(tv.tokenizer(), tv.tokenizer(), "d", "t")
    other = tv.tokenizer(swap=(20, 31))
    with pytest.raises(ConfigError, match=r"tokenizers disagree on id 20: draft has .* target has .*first of the \d+ shared ids"):
        raise_if_tokenizers_disagree(other, tv.tokenizer(), "tiny-draft", "tiny-vlm")


def test_a_text_draft_sees_sequential_positions_and_no_images():
    target = tv.vlm()
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    ctx = tv.context(target, tv.text_draft_from(target, noise=0.2))
    prop = tv.draft_proposer(ctx, 2)
    seen: list[torch.Tensor] = []
    inner = prop.runner.runner
    original = inner.forward

    def spy(tokens, positions, *args, **kwargs):
        seen.append(positions.clone())
        return original(tokens, positions, *args, **kwargs)

    inner.forward = spy
    tv.decode(ctx, prop, ids, mms, 3, 6)
    assert seen[0].shape == (3, max(map(len, ids))) and torch.equal(seen[0][0], torch.arange(seen[0].shape[1]))
    assert all(p.ndim == 2 for p in seen)  # 1-D positions per row, never the target's compressed M-RoPE ones
