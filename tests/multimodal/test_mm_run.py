"""The offline demo end to end through run(cfg): dataset=images on a tiny random VLM preset, with its
smaller-vocabulary text draft and with a VLM draft. Skipped until the tiny VLM presets, the
`images` source and run.py's mm_inputs wiring are in (the diffs of issue 4's report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from specbench.errors import ConfigError
from specbench.models.presets import PRESETS
from specbench.run import CONF_DIR, run

pytestmark = pytest.mark.skipif("tiny-qwen2.5-vl" not in PRESETS, reason="tiny VLM presets not registered yet")

DEMO = ["strategy=draft_model", "dataset=images", "dataset.num_prompts=6", "max_new_tokens=8", "logger=none", "engine.batch_size=3"]


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("target,draft,k", [("tiny-qwen2.5-vl", "auto", 3), ("tiny-qwen3-vl", "self", 2)])
def test_the_offline_image_demo_runs_and_is_lossless(tmp_path: Path, target, draft, k):
    run(_cfg(*DEMO, f"target={target}", f"draft={draft}", f"strategy.k={k}", f"+output_dir={tmp_path}"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["exact_match"]["all_equal"] and results["exact_match"]["n"] == 6
    if draft == "self":
        assert results["strategy"]["acceptance_length"] == k + 1
    lines = [json.loads(x) for x in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    image_id = PRESETS[target].arch["image_token_id"]
    assert sum(image_id in line["prompt_token_ids"] for line in lines) == 5  # 5 image prompts, 1 text-only


def test_trees_on_a_vlm_target_run_on_the_fast_path_and_are_refused_on_the_reference(tmp_path: Path):
    """FastVLMRunner verifies trees on our decoder past the prefill (lossless, a self-draft accepts everything); the
    reference VLMRunner (engine.backend=transformers) verifies chains only: a ConfigError naming both, not a
    TypeError from the first tree verify."""
    tree = ["target=tiny-qwen3-vl", "draft=self", "strategy.k=2", "strategy.tree=topk", "strategy.top_k=2"]
    run(_cfg(*DEMO, *tree, f"+output_dir={tmp_path / 'fast'}"))
    results = json.loads((tmp_path / "fast" / "results.json").read_text())
    assert results["exact_match"]["all_equal"] and results["strategy"]["acceptance_length"] == 3.0
    with pytest.raises(ConfigError, match=r"strategy.tree=topk with target .*tiny-qwen3-vl.*allowed: strategy.tree=chain"):
        run(_cfg(*DEMO, *tree, "engine.backend=transformers", f"+output_dir={tmp_path / 'reference'}"))


def test_continuous_batching_refuses_images_and_vision_language_models(tmp_path: Path):
    """A VLM's images and M-RoPE positions are set per batch: engine.scheduler=continuous is refused, early for
    prompts with images (plan), and for a VLM target or draft on text prompts (before any decoding)."""
    with pytest.raises(ConfigError, match=r"engine.scheduler=continuous with prompts that carry images \(dataset "
                                          r"'images'\); allowed: engine.scheduler=static"):
        run(_cfg(*DEMO, "target=tiny-qwen2.5-vl", "engine.scheduler=continuous", f"+output_dir={tmp_path / 'a'}"))
    text = ["dataset=builtin", "dataset.num_prompts=2", "engine.scheduler=continuous", "strategy=draft_model",
            "max_new_tokens=4", "logger=none"]
    with pytest.raises(ConfigError, match=r"continuous with a vision-language target and draft \(tiny-qwen3-vl\)"):
        run(_cfg(*text, "target=tiny-qwen3-vl", "draft=self", f"+output_dir={tmp_path / 'b'}"))
