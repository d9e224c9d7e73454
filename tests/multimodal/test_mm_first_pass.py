"""draft_model for VLM targets, continued: a VLM drafting for itself accepts everything (AL = k+1 at
T=0 and T=1 on image prompts), and the draft's first pass one token longer than the target's
prefill (the vLLM crash on the first image request) runs and stays exact."""

from __future__ import annotations

import pytest
import tiny_vlm as tv

from specbench.data.images import ImagePrompt
from specbench.verify import SamplingParams

KINDS = ["qwen2_5_vl", "qwen3_vl"]


def _drafts(target):
    return {"text draft, smaller vocabulary": tv.text_draft_from(target, noise=0.2),
            "vlm draft": tv.perturbed_vlm(target, 0.3)}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("kind", KINDS)
def test_a_vlm_drafting_for_itself_accepts_everything(kind, temperature):
    target = tv.vlm(kind)
    ids, mms = tv.encoded(target, tv.mixed_prompts()[:2])  # image prompts (one and two images)
    params = SamplingParams(temperature=temperature, seed=5)
    ctx = tv.context(target, target, params)
    for batch_size in (1, 2):
        rows = tv.decode(ctx, tv.draft_proposer(ctx, 3), ids, mms, batch_size, 13, params)
        assert tv.acceptance_length(rows) == 4.0
    assert ctx.target_runner.encoder_calls == 4  # one per image row per batch; the draft has its own runner


def _raw(target, head: list[int], n_images: int, tail: list[int]) -> tuple[list[int], dict]:
    """A prompt of raw ids with `n_images` 112x112 images (4 tokens each) between head and tail."""
    c = target.model.config
    ids, mm_prompt = list(head), ImagePrompt(id="raw", text="x", images=tuple(tv.wide_image(i, 112, 112) for i in range(n_images)))
    _, mm = tv.encoded(target, [mm_prompt])
    for _ in range(n_images):
        ids += [c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id]
    return ids + tail, mm[0]


@pytest.mark.parametrize("kind", KINDS)
def test_draft_first_pass_one_longer_than_the_targets(kind):
    """vLLM crashed on the first image request (mask [282] vs embeds [283, 2048]): the draft's first
    pass held one token more than the target's prefill. Here the draft's first forward covers the
    prompt and its catch-up forward adds the first token at slot L; rows whose prompts differ by one
    (so one row's first token sits where the other's prompt ends), and prompts that end inside or
    right after the image, must all run and stay exact, for a text draft and a VLM draft."""
    target = tv.vlm(kind)
    tok = target.tokenizer
    q = tok("How many shapes are in the image ?", add_special_tokens=False)["input_ids"]
    c = target.model.config
    a = _raw(target, [tok.convert_tokens_to_ids("<|im_start|>")] + q, 1, [])  # ends with vision_end
    b = _raw(target, [tok.convert_tokens_to_ids("<|im_start|>")] + q + q[:1], 1, [])  # one longer
    ends_in_image = (a[0][:-1], a[1])  # last prompt token is an image placeholder
    two = _raw(target, q[:2], 2, q[2:4])
    assert len(b[0]) == len(a[0]) + 1 and ends_in_image[0][-1] == c.image_token_id
    prompts = [a, b, ends_in_image, two]
    ids, mms = [p[0] for p in prompts], [p[1] for p in prompts]
    expected = [tv.hf_greedy_no_cache(target.model, i, m, 10) for i, m in zip(ids, mms)]
    assert expected[:2] + expected[3:] == [tv.hf_greedy(target.model, i, m, 10) for i, m in zip(ids[:2] + ids[3:], mms[:2] + mms[3:])]
    for name, draft in _drafts(target).items():
        ctx = tv.context(target, draft)
        for batch_size in (2, 4):
            rows = tv.decode(ctx, tv.draft_proposer(ctx, 3), ids, mms, batch_size, 10)
            assert [r.output_ids for r in rows] == expected, f"{name} batch={batch_size}"
