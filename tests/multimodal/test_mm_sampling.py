"""T > 0 with a draft whose vocabulary is smaller than the VLM target's: on an image prompt the
emitted tokens follow the target's exact distribution (the draft's q is padded with zeros to the
target's vocabulary), and the test fails against a wrong acceptance rule (mutation check)."""

from __future__ import annotations

import inspect

import pytest
import torch
import tiny_vlm as tv
from specbench_testing import chisquare_pvalue, resample_from_p

from specbench.verify import SamplingParams, logits_to_probs

N = 3000
PARAMS = SamplingParams(temperature=0.7, seed=11)


def _exact_marginals(target, ids: list[int], mm: dict, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact distributions of the first and second generated tokens, from transformers' forward:
    the prompt with its image once, then every possible first token from the KV cache."""
    model = target.model
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=x, pixel_values=mm["pixel_values"], image_grid_thw=mm["image_grid_thw"],
                    mm_token_type_ids=(x == model.config.image_token_id).int(), use_cache=True)
        p1 = logits_to_probs(out.logits[0, -1], params)  # [V]
        vocab = p1.shape[0]
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        cache.batch_repeat_interleave(vocab)
        delta = int(model.model.rope_deltas.reshape(-1)[0])
        pos = torch.full((3, vocab, 1), len(ids) + delta)
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"  # 5.24 / 5.17
        step = model(input_ids=torch.arange(vocab)[:, None], position_ids=pos, attention_mask=torch.ones(vocab, len(ids) + 1, dtype=torch.long),
                     **{cache_kw: cache})
        p2_given = logits_to_probs(step.logits[:, -1], params)  # [V, V]
    return p1, p1 @ p2_given


@pytest.fixture(scope="module")
def setup():
    target = tv.vlm(seed=4)
    draft = tv.text_draft_from(target, noise=1.0)  # vocabulary 197 < 211, a poor guesser: many rejections
    ids, mms = tv.encoded(target, tv.mixed_prompts()[:1])
    p1, p2 = _exact_marginals(target, ids[0], mms[0], PARAMS)
    assert p2[tv.DRAFT_VOCAB:].sum() > 0.02  # target-only ids carry mass the draft cannot propose
    return target, draft, ids[0], mms[0], p1, p2


def _sample(setup, rule=None):
    target, draft, ids, mm, p1, p2 = setup
    ctx = tv.context(target, draft, PARAMS)
    rows = tv.decode(ctx, tv.draft_proposer(ctx, 2), [ids] * N, [mm] * N, N, 2, PARAMS, rule=rule)
    assert ctx.target_runner.encoder_calls == 1  # N rows share one image input: encoded once
    out = torch.tensor([r.output_ids for r in rows])  # [N, 2]
    c1 = torch.bincount(out[:, 0], minlength=p1.shape[0])
    c2 = torch.bincount(out[:, 1], minlength=p1.shape[0])
    acc = sum(r.accepted_tokens for r in rows) / sum(r.draft_tokens for r in rows)
    return c1, c2, acc


def test_sampling_with_a_smaller_draft_vocabulary_follows_the_target(setup):
    *_, p1, p2 = setup
    c1, c2, acc = _sample(setup)
    assert 0.05 < acc < 0.95  # acceptance and rejection both happen
    assert c2[tv.DRAFT_VOCAB:].sum() > 0  # ids only the target has were emitted (from the residual)
    assert chisquare_pvalue(c1, p1) > 1e-4
    assert chisquare_pvalue(c2, p2) > 1e-4  # the first speculative token's marginal


def test_the_distribution_test_fails_against_a_wrong_acceptance_rule(setup):
    *_, p1, p2 = setup
    _, c2, _ = _sample(setup, rule=resample_from_p)
    assert chisquare_pvalue(c2, p2) < 1e-6
