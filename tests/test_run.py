"""run(cfg) through Hydra's compose API: outputs, metrics, and every bad input's message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from specbench.errors import ConfigError
from specbench.run import CONF_DIR, plan, run

TINY = ["target=tiny-llama", "strategy=draft_model", "dataset=builtin", "dataset.num_prompts=5", "max_new_tokens=6", "logger=none"]


def cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_config_is_the_embedded_default():
    c = cfg()
    assert c.target.name == "smollm2-135m" and c.draft.name == "auto" and c.strategy.name == "eagle"
    assert c.dataset.name == "mt-bench" and c.logger.name == "wandb" and c.sampling.temperature == 0
    assert plan(c).draft is None  # eagle reads the target's features; no draft model to load
    p = plan(cfg("strategy=draft_model"))
    assert p.draft is not None and p.draft.name == "smollm2-135m"  # draft=auto: the preset's pair (itself)


def test_draft_auto_picks_the_preset_pair():
    p = plan(cfg("target=qwen3-32b", "strategy=draft_model", "dataset=builtin"))
    assert p.target.path == "Qwen/Qwen3-32B" and p.draft.name == "qwen3-1.7b" and p.draft.path == "Qwen/Qwen3-1.7B"
    assert plan(cfg("target=qwen3-8b-random", "strategy=draft_model", "dataset=builtin")).draft.name == "qwen3-0.6b-random"


def test_run_writes_results_and_outputs(tmp_path: Path):
    report = run(cfg(*TINY, "draft=self", "strategy.k=2", f"+output_dir={tmp_path}", "engine.batch_size=2"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["strategy"]["acceptance_length"] == 3.0  # self-draft, k=2
    assert results["exact_match"] == {"equal": 5, "n": 5, "all_equal": True, "first_mismatch_index": None}
    assert results["baseline"]["acceptance_length"] == 1.0
    for key in ("drafts", "draft_tokens", "accepted_tokens", "acceptance_rate", "per_position_acceptance",
                "ttft_ms", "tpot_ms", "itl_ms", "output_tokens_per_s", "time_split"):
        assert key in results["strategy"], key
    assert set(results["strategy"]["tpot_ms"]) == {"mean", "median", "p90", "n"}
    assert results["speedup"]["speedup"] > 0
    assert results["environment"]["torch"] and "git_sha" in results["environment"]
    assert set(results["by_category"])  # builtin prompts carry categories
    lines = [json.loads(x) for x in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and lines[0]["prompt_id"].startswith("builtin/")
    assert lines[0]["prompt_token_ids"] and len(lines[0]["output_token_ids"]) == 6
    assert lines[0]["output_token_ids"] == lines[0]["baseline_output_token_ids"]
    assert report.results["run"]["lossless"] is True


def test_wandb_offline_logging_writes_a_run(tmp_path: Path):
    run(cfg(*TINY[:-1], "dataset.num_prompts=2", "logger=wandb", "strategy=none", f"+output_dir={tmp_path}"))
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline W&B run directory"


BAD = [
    (["strategy=eagle_typo"], None),  # Hydra itself refuses an unknown config group option
    (["strategy.k=0"], "strategy.k=0 for strategy 'draft_model'; allowed: an integer >= 1"),
    (["strategy.k=-2"], "allowed: an integer >= 1"),
    (["sampling.temperature=-1"], "sampling.temperature=-1"),
    (["sampling.top_p=0"], "sampling.top_p=0"),
    (["sampling.top_p=1.2"], "allowed: a number in (0, 1]"),
    (["sampling.top_k=-3"], "sampling.top_k=-3"),
    (["target.name=nope-7b"], "unknown target model 'nope-7b'; allowed:"),
    (["draft=smollm2-135m-random"], "has a vocabulary of 49152 entries, larger than target 'tiny-llama'"),
    (["dataset.name=nope"], "unknown dataset 'nope'"),
    (["dataset=jsonl", "dataset.path=/no/such/file.jsonl"], "/no/such/file.jsonl"),
    (["target.path=/no/such/model.gguf"], "does not exist"),
    (["max_new_tokens=0"], "max_new_tokens=0"),
    (["engine.batch_size=0"], "engine.batch_size=0"),
    (["engine.dtype=float8"], "unknown engine.dtype 'float8'"),
]


@pytest.mark.parametrize("overrides, message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_fails_before_any_model_loads(overrides, message):
    if message is None:
        with pytest.raises(Exception, match="eagle_typo"):
            cfg(*TINY, *overrides)
        return
    with pytest.raises(ConfigError) as e:
        plan(cfg(*TINY, *overrides))
    assert message in str(e.value)


def test_unknown_strategy_class_lists_the_available_ones():
    c = cfg(*TINY, "strategy._target_=specbench.strategies.nope.Nope", "strategy.name=nope")
    with pytest.raises(ConfigError, match=r"unknown strategy 'nope'; allowed: .*draft_model.*none"):
        plan(c)


def test_prompt_longer_than_the_context_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="max_model_len"):
        run(cfg(*TINY, "max_model_len=20", f"+output_dir={tmp_path}"))
    assert not (tmp_path / "results.json").exists()
