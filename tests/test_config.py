"""The configuration the Hydra way (specbench.config): one model group serving as target and draft, types that
Hydra itself refuses, the packaged yamls agreeing with the schema, and conf/ found where this copy keeps it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import asdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from specbench.config import CONF_DIR, EngineConfig, RunConfig, SamplingConfig, options
from specbench.errors import ConfigError
from specbench.run import plan

TINY = ["target=tiny-llama", "strategy=draft_model", "dataset=builtin", "dataset.num_prompts=2", "max_new_tokens=6", "logger=none"]


def cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def composition_error(*overrides: str) -> str:
    """Hydra's message for a refused override, with its cause (what the CLI prints)."""
    with pytest.raises(ConfigCompositionException) as e:
        cfg(*overrides)
    return f"{e.value}\n{e.value.__cause__}"


# --- one model group, mounted as target and as draft -------------------------------------------------


def test_target_and_draft_choose_from_the_one_model_group():
    models = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
    assert options("target") == models and options("draft") == sorted([*models, "auto", "self"])
    assert not (CONF_DIR / "target").exists()  # no twin folders
    p = plan(cfg("target=qwen3-8b", "draft=qwen3-0.6b", "strategy=draft_model", "dataset=builtin"))
    assert (p.target.name, p.target.path) == ("qwen3-8b", "Qwen/Qwen3-8B")
    assert (p.draft.name, p.draft.path) == ("qwen3-0.6b", "Qwen/Qwen3-0.6B")
    c = cfg("target=qwen3-8b-random", "draft=smollm2-135m")
    assert OmegaConf.to_container(c.draft) == {**OmegaConf.to_container(cfg("target=smollm2-135m").target)}


def test_draft_auto_and_self():
    assert cfg().draft.name == "auto"
    assert plan(cfg(*TINY, "draft=auto")).draft.name == "tiny-llama"  # tiny-llama's pair is itself
    assert plan(cfg("target=qwen3-32b", "draft=auto", "strategy=draft_model", "dataset=builtin")).draft.name == "qwen3-1.7b"
    c = cfg("target=qwen3-4b", "draft=self", "target.revision=abc")
    assert c.draft.name == "qwen3-4b" and c.draft.revision == "abc"  # self follows the target's settings
    p = plan(cfg(*TINY, "draft=self"))
    assert p.draft == p.target


def test_model_settings_and_sweeps_use_the_mounted_keys():
    c = cfg("target=tiny-qwen3", "target.source=random", "draft=tiny-llama", "draft.init_seed=3")
    assert (c.target.name, c.target.source, c.draft.name, c.draft.init_seed) == ("tiny-qwen3", "random", "tiny-llama", 3)
    assert cfg("model@target=tiny-qwen3").target.name == "tiny-qwen3"  # Hydra's own spelling of the same choice


def test_unknown_models_list_the_options():
    for overrides, group in ((["target=nope"], "target"), (["target=auto"], "target"), (["draft=nope"], "draft")):
        with pytest.raises(MissingConfigException) as e:
            cfg(*overrides)
        assert f"Available options in '{group}'" in str(e.value) and "qwen3-8b-random" in str(e.value)
        assert ("\tauto\n" in str(e.value)) == (group == "draft")  # auto and self are draft-only choices


# --- types: Hydra refuses them while composing ------------------------------------------------------

BAD_TYPES = [
    ("max_new_tokens=abc", "max_new_tokens", "Value 'abc' of type 'str' could not be converted to Integer"),
    ("engine.batch_size=x", "engine.batch_size", "Value 'x' of type 'str' could not be converted to Integer"),
    ("sampling.temperature=hot", "sampling.temperature", "Value 'hot' of type 'str' could not be converted to Float"),
    ("engine.warmup=maybe", "engine.warmup", "Value 'maybe' is not a valid bool"),
    ("dataset.num_prompts=all", "dataset.num_prompts", "Value 'all' of type 'str' could not be converted to Integer"),
    ("target.init_seed=x", "target.init_seed", "Value 'x' of type 'str' could not be converted to Integer"),
    ("verify.synthetic_per_position=[0.5,x]", "verify.synthetic_per_position[1]", "could not be converted to Float"),
]


@pytest.mark.parametrize("override, key, message", BAD_TYPES, ids=[o for o, _, _ in BAD_TYPES])
def test_hydra_refuses_a_bad_type(override, key, message):
    text = composition_error(*TINY, override)
    assert f"Error merging override {override}" in text and message in text and f"full_key: {key}" in text


def test_hydra_refuses_an_unknown_key():
    assert "Could not override 'engine.batch'" in composition_error(*TINY, "engine.batch=2")


def test_a_plain_mapping_gets_the_same_checks():
    good = OmegaConf.to_container(cfg(*TINY), resolve=True)
    assert plan(good).max_new_tokens == 6
    with pytest.raises(ConfigError, match=r"^max_new_tokens: Value 'abc' of type 'str' could not be converted to Integer$"):
        plan({**good, "max_new_tokens": "abc"})
    with pytest.raises(ConfigError, match=r"engine.batch_size=0; allowed: an integer >= 1"):
        plan({**good, "engine": {"batch_size": 0}})
    with pytest.raises(ConfigError, match=r"unknown engine.scheduler 'dynamic'; allowed: continuous, static"):
        plan({**good, "engine": {"scheduler": "dynamic"}})
    with pytest.raises(ConfigError, match=r"engine.stop_token_ids=\[3, -1\]: \[-1\] are not token ids; "
                                          r"allowed: a list of integers >= 0"):
        plan({**good, "engine": {"stop_token_ids": [3, -1]}})
    minimal = {key: good[key] for key in ("target", "strategy", "dataset")}  # everything else: the schema's defaults
    p = plan(minimal)
    assert (p.max_new_tokens, p.batch_size, p.sampling.temperature, p.draft.name) == (64, 1, 0.0, "tiny-llama")


def test_the_cli_prints_what_was_given_and_what_is_allowed(tmp_path: Path):
    def cli(*overrides: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specbench", *overrides, "logger=none"], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)

    bad = cli("max_new_tokens=abc")
    assert bad.returncode != 0
    assert "Error merging override max_new_tokens=abc\nValue 'abc' of type 'str' could not be converted to Integer" in bad.stderr
    bad = cli("strategy=nope")
    assert bad.returncode != 0 and "Could not find 'strategy/nope'" in bad.stderr
    assert "Available options in 'strategy':\n\tdraft_model\n\teagle" in bad.stderr
    assert not (tmp_path / "outputs").exists() or not list((tmp_path / "outputs").rglob("results.json"))


# --- the packaged yamls and the schema agree --------------------------------------------------------


def test_the_packaged_defaults_are_the_schemas():
    c = cfg()
    assert OmegaConf.to_container(c.sampling) == asdict(SamplingConfig())
    assert OmegaConf.to_container(c.engine) == asdict(EngineConfig())
    schema = RunConfig(target=None, strategy=None, dataset=None)  # type: ignore[arg-type]
    for key in ("max_new_tokens", "max_model_len", "baseline", "output_dir", "resume", "objective"):
        assert c[key] == getattr(schema, key), key
    assert OmegaConf.to_container(c.verify) == asdict(schema.verify)


def test_every_packaged_option_composes_against_the_schema():
    for group in ("strategy", "dataset", "logger", "draft"):
        for name in options(group):
            cfg(f"{group}={name}")
    for name in options("target")[:: 5]:
        cfg(f"target={name}")


# --- where conf/ is ---------------------------------------------------------------------------------


def test_conf_is_the_checkouts_top_level_folder_and_the_wheels_package():
    root = Path(__file__).resolve().parents[1]
    assert CONF_DIR == root / "conf" and (CONF_DIR / "config.yaml").is_file()
    project = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert project["package-dir"]["specbench.conf"] == "conf"
    packages = {str(p.parent.relative_to(root)).replace("/", ".") for p in (root / "specbench").rglob("__init__.py")}
    assert set(project["packages"]) == packages | {"specbench.conf"}  # a new subpackage must be listed there
    assert "**/*.yaml" in project["package-data"]["specbench.conf"]
