"""The configuration the Hydra way (specbench.config): one model group serving as target and draft, and conf/
found where this copy keeps it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf

from specbench.config import CONF_DIR, options
from specbench.run import plan

TINY = ["target=tiny-llama", "strategy=draft_model", "dataset=builtin", "dataset.num_prompts=2", "max_new_tokens=6", "logger=none"]


def cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


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


# --- where conf/ is ---------------------------------------------------------------------------------


def test_conf_is_the_checkouts_top_level_folder_and_the_wheels_package():
    root = Path(__file__).resolve().parents[1]
    assert CONF_DIR == root / "conf" and (CONF_DIR / "config.yaml").is_file()
    project = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert project["package-dir"]["specbench.conf"] == "conf"
    packages = {str(p.parent.relative_to(root)).replace("/", ".") for p in (root / "specbench").rglob("__init__.py")}
    assert set(project["packages"]) == packages | {"specbench.conf"}  # a new subpackage must be listed there
    assert "**/*.yaml" in project["package-data"]["specbench.conf"]
