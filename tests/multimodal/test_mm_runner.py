"""VLMRunner (the reference) and FastVLMRunner (our decoder past the prefill): greedy decoding equals transformers'
own generate (pixel values, grid sizes), per-row M-RoPE positions in a batch that mixes image, two-image and
text-only prompts, and the guards."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import tiny_vlm as tv

from specbench_testing import assert_runner
from specbench.data.images import ImagePrompt
from specbench.errors import ConfigError
from specbench.models.decoder import DecoderRunner
from specbench.models.draft_runner import make_draft_runner
from specbench.models.cuda_graphs import GraphedRunner
from specbench.models.multimodal import FastVLMRunner, VLMRunner, make_vlm_aware_runner
from specbench.strategies.none import TargetOnly

KINDS = ["qwen2_5_vl", "qwen3_vl"]


@pytest.mark.parametrize("backend,graphs", [("auto", False), ("auto", True), ("transformers", False)],
                         ids=["fast", "fast-graphed", "reference"])
@pytest.mark.parametrize("kind", [*KINDS, "qwen2_vl"])
def test_target_only_equals_transformers_generate_at_batch_1_and_3(kind, backend, graphs):
    target = tv.vlm(kind)
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    assert [mm is None for mm in mms] == [False, False, True] and mms[1]["image_grid_thw"].shape[0] == 2
    expected = [tv.hf_greedy(target.model, i, m, 16) for i, m in zip(ids, mms)]
    ctx = tv.context(target, None, backend=backend, graphs=graphs)
    assert type(ctx.target_runner) is (FastVLMRunner if backend == "auto" else VLMRunner)
    for batch_size in (1, 3):
        rows = tv.decode(ctx, TargetOnly(ctx), ids, mms, batch_size, 16)
        assert [r.output_ids for r in rows] == expected, f"batch {batch_size}"


@pytest.mark.parametrize("kind", KINDS)
def test_positions_per_row_in_a_mixed_batch(kind):
    target = tv.vlm(kind)
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    runner = make_vlm_aware_runner(target.model)
    s = max(map(len, ids)) + 9
    runner.allocate(3, s)
    runner.begin_batch(ids, mms)
    pos = runner.position_ids  # [3, B, S]
    core = target.model.model
    for b in (0, 1):  # image rows: transformers' rope index for that row alone, then s + delta
        x = torch.tensor([ids[b]])
        ref, delta = core.get_rope_index(x, mm_token_type_ids=(x == target.model.config.image_token_id).int(),
                                         image_grid_thw=mms[b]["image_grid_thw"], attention_mask=torch.ones_like(x))
        n = len(ids[b])
        assert torch.equal(pos[:, b, :n], ref[:, 0])
        cont = torch.arange(n, s) + int(delta)
        assert torch.equal(pos[:, b, n:], cont.expand(3, -1))
        assert runner.rope_deltas[b] == int(delta) < 0  # images compress positions
    # the wide image (grid 4x8 -> 2x4 merged) has distinct height and width components
    img2 = (torch.tensor(ids[1]) == target.model.config.image_token_id).nonzero()[:, 0][4:]
    assert pos[1, 1, img2].unique().numel() == 2 and pos[2, 1, img2].unique().numel() == 4
    # the text-only row: sequential in all three components, not row 0's positions broadcast
    assert torch.equal(pos[:, 2], torch.arange(s).expand(3, -1))
    assert not torch.equal(pos[:, 0], pos[:, 1])


def test_rows_sharing_one_image_input_encode_it_once():
    target = tv.vlm()
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    runner = make_vlm_aware_runner(target.model)
    runner.allocate(4, 64)
    runner.begin_batch([ids[0], ids[1], ids[2], ids[0]], [mms[0], mms[1], None, mms[0]])
    assert runner.encoder_calls == 2
    assert runner.rows[2] is None and torch.equal(runner.rows[0].embeds, runner.rows[3].embeds)


def test_a_generated_image_token_id_is_an_ordinary_token():
    """The model is pushed to emit the image placeholder id; image slots are fixed by the prompt, so
    no count check fires and the output still equals generate's (whose cached steps embed the id)."""
    target = tv.vlm(seed=2)
    image_id = target.model.config.image_token_id
    with torch.no_grad():
        target.model.lm_head.weight[image_id] *= 6.0
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    expected = [tv.hf_greedy(target.model, i, m, 12) for i, m in zip(ids, mms)]
    assert sum(out.count(image_id) for out in expected) >= 3
    ctx = tv.context(target, tv.text_draft_from(target, noise=0.1))
    for k in (1, 3):
        rows = tv.decode(ctx, tv.draft_proposer(ctx, k), ids, mms, 3, 12)
        assert [r.output_ids for r in rows] == expected


def test_the_runner_is_chosen_from_the_models_own_config():
    vlm, text = tv.vlm(), tv.text_draft()
    assert type(make_vlm_aware_runner(vlm.model)) is FastVLMRunner
    assert type(make_vlm_aware_runner(vlm.model, "native")) is FastVLMRunner
    assert type(make_vlm_aware_runner(vlm.model, "transformers")) is VLMRunner
    assert isinstance(make_vlm_aware_runner(vlm.model, graphs=True).step, GraphedRunner)
    assert isinstance(make_vlm_aware_runner(text.model), DecoderRunner)
    assert not hasattr(make_draft_runner(text.model), "begin_batch")  # a text draft never sees images
    assert hasattr(make_draft_runner(vlm.model), "begin_batch")
    fake = SimpleNamespace(config=SimpleNamespace(model_type="llava", vision_config=object()))
    with pytest.raises(ConfigError, match="'llava' is a vision-language model.*allowed: qwen2_vl, qwen2_5_vl, qwen3_vl"):
        make_vlm_aware_runner(fake)


def test_the_vlm_runners_are_runners():
    """models.runner.Runner: the VLM runner and a VLM draft's guarded runner (the text runners: tests/models)."""
    vlm = tv.vlm()
    for runner in (VLMRunner(vlm.model), FastVLMRunner(vlm.model), make_draft_runner(vlm.model)):
        assert_runner(runner)


def test_a_placeholder_count_that_does_not_match_the_images_is_a_clear_error():
    target = tv.vlm()
    ids, mms = tv.encoded(target, tv.mixed_prompts())
    runner = make_vlm_aware_runner(target.model)
    runner.allocate(1, 64)
    with pytest.raises(ConfigError, match=r"row 0: the prompt has 3 image placeholder tokens .* give 4 embeddings"):
        runner.begin_batch([[t for i, t in enumerate(ids[0]) if i != 3]], [mms[0]])


def test_an_image_row_without_mm_inputs_is_text():
    """Placeholder ids with no images attached are ordinary tokens at sequential positions."""
    target = tv.vlm()
    ids, _ = tv.encoded(target, [ImagePrompt(id="x", text="What is 12 times 7?", images=(tv.wide_image(0),))])
    runner = make_vlm_aware_runner(target.model)
    runner.allocate(1, len(ids) + 2)
    runner.begin_batch([ids], None)
    assert runner.rows == [None] and torch.equal(runner.position_ids[:, 0], torch.arange(len(ids) + 2).expand(3, -1))
