"""The offline image prompt set, MMStar's clear error without `datasets`, the dataset configs, and
encoding a multimodal prompt into (token ids, mm_inputs) with a tokenizer and an image processor."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
import tiny_vlm as tv
from omegaconf import OmegaConf

from specbench.data import Prompt, encode_prompt
from specbench.config import CONF_DIR
from specbench.data.images import (ImagePrompt, encode_mm_prompt, encode_mm_prompts, images_source, mm_images,
                                   mmstar_source, synthetic_image_prompts)
from specbench.data.prompts import DatasetConfig
from specbench.errors import ConfigError
from specbench.models.loading import ByteTokenizer, LoadedModel, ModelSpec
from specbench.models.multimodal import image_processor_for

CONF = CONF_DIR / "dataset"


def test_the_offline_set_is_deterministic_and_mixes_kinds():
    a, b = list(synthetic_image_prompts(12, seed=3)), list(synthetic_image_prompts(12, seed=3))
    assert [p.id for p in a] == [f"images/{i}" for i in range(12)]
    assert [(p.text, p.answer) for p in a] == [(p.text, p.answer) for p in b]
    assert all(x.tobytes() == y.tobytes() for p, q in zip(a, b) for x, y in zip(p.images, q.images))
    assert {len(p.images) for p in a} == {0, 1, 2}  # text-only, one image, two images
    assert {p.category for p in a} == {"shapes", "chart", "text", "compare", "text-only"}
    assert all(img.size == (112, 112) and img.mode == "RGB" for p in a for img in p.images)
    other = list(synthetic_image_prompts(12, seed=4))
    assert any(x.tobytes() != y.tobytes() for p, q in zip(a, other) for x, y in zip(p.images, q.images))
    assert mm_images(Prompt(id="x", text="y")) == ()


def test_the_dataset_configs_parse_and_images_yields_num_prompts():
    for name in ("images", "mmstar"):
        opts = DatasetConfig.parse(OmegaConf.load(CONF / f"{name}.yaml"))
        assert opts.name == name
    opts = DatasetConfig.parse({**OmegaConf.to_container(OmegaConf.load(CONF / "images.yaml")), "num_prompts": 30})
    assert len(list(images_source(opts))) == 30
    assert len(list(images_source(DatasetConfig(name="images")))) == 24


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="`datasets` is installed")
def test_mmstar_without_datasets_says_what_to_install():
    opts = DatasetConfig.parse(OmegaConf.load(CONF / "mmstar.yaml"))
    with pytest.raises(ConfigError, match="'Lin-Chen/MMStar' needs the `datasets` package: pip install datasets"):
        next(mmstar_source(opts))


def _placeholder_runs(ids: list[int], image_id: int) -> list[int]:
    runs, n = [], 0
    for t in ids + [-1]:
        if t == image_id:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


def test_encoding_expands_each_image_to_its_number_of_tokens():
    target = tv.vlm()
    c = target.model.config
    prompts = tv.mixed_prompts()
    ids, mms = encode_mm_prompts(prompts, target.tokenizer, tv.image_processor(), c)
    # one image of 112x112 -> 56x56 -> grid (1, 4, 4) -> 4 tokens; the wide one (1, 4, 8) -> 8 tokens
    assert mms[0]["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert mms[1]["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 8]]
    assert mms[1]["pixel_values"].shape == (16 + 32, 3 * 2 * 14 * 14)
    assert _placeholder_runs(ids[0], c.image_token_id) == [4]
    assert _placeholder_runs(ids[1], c.image_token_id) == [4, 8]
    tok = target.tokenizer
    text = tok.decode(ids[1])
    assert text.startswith("<|im_start|> user <|vision_start|>") and text.count("<|vision_start|>") == 2 and text.endswith("<|im_start|> assistant")
    assert mms[2] is None and ids[2] == encode_prompt(prompts[2], tok)  # text-only: the ordinary encoding


def test_a_chat_template_without_image_entries_gets_placeholders_before_the_text():
    target = tv.vlm()
    tok = copy.deepcopy(tv.tokenizer())  # the cached one stays untouched
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}<|im_start|>"
    ids, mm = encode_mm_prompt(tv.mixed_prompts()[1], tok, tv.image_processor(), target.model.config)
    assert _placeholder_runs(ids, target.model.config.image_token_id) == [4, 8]
    assert ids[:2] == tok.convert_tokens_to_ids(["<|im_start|>", "<|vision_start|>"])


def test_without_a_chat_template_images_come_first_as_raw_ids():
    """Random-weight presets use a byte tokenizer: vision_start, the image tokens, vision_end, then bytes."""
    c = tv.qwen25_vl_config(vocab=300)
    ids, mm = encode_mm_prompt(tv.mixed_prompts()[0], ByteTokenizer(300), tv.image_processor(), c)
    assert ids[:6] == [c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id]
    assert mm["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_an_image_prompt_for_a_text_only_target_is_refused():
    with pytest.raises(ConfigError, match="has images but the target has no image processor"):
        encode_mm_prompt(tv.mixed_prompts()[0], tv.tokenizer(), None, None)


def test_random_vlm_presets_get_an_image_processor_from_their_config():
    target = tv.vlm()
    proc = image_processor_for(LoadedModel(spec=ModelSpec(name="x", source="random"), model=target.model, tokenizer=None))
    assert (proc.patch_size, proc.merge_size) == (14, 2)
    out = proc(images=[tv.wide_image(0, 300, 200)], return_tensors="pt")
    assert int(out["image_grid_thw"].prod()) <= 256 and torch.is_tensor(out["pixel_values"])
    assert image_processor_for(tv.text_draft()) is None


def test_image_prompts_are_prompts():
    p = ImagePrompt(id="a", text="b", images=(tv.wide_image(0),), answer="c")
    assert isinstance(p, Prompt) and p.chat and p.category is None
