"""Drafter checkpoints (eagle, medusa): a path is what it says or an error naming it, and every failure to
read one is a ConfigError naming the file, raised by validate() before any model loads (issue 10)."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file

from specbench_testing import tiny
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.checkpoints import read_checkpoint_config, read_weights
from specbench.strategies.eagle import EagleConfig, EagleHead, EagleProposer
from specbench.strategies.medusa import MedusaConfig, MedusaHeads, MedusaProposer
from specbench.verify import SamplingParams


class Note:
    """Not a tensor: torch.load(weights_only=True) refuses to unpickle it."""


@pytest.fixture(scope="module")
def llama():
    return tiny("tiny-llama")


def _eagle(model, path):
    EagleHead(EagleConfig.for_target(model.model.config, None, "tiny-llama"), model.model).save(path)


def _medusa(model, path):
    MedusaHeads(MedusaConfig(48, 3, 101, "tiny-llama"), model.model).save(path)


KINDS = {"eagle": (EagleProposer, _eagle), "medusa": (MedusaProposer, _medusa)}


def _ctx(model):
    return BuildContext(target=model, target_runner=make_runner(model.model), draft=None, sampling=SamplingParams(),
                        device=torch.device("cpu"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_mistyped_checkpoint_path_is_an_error_naming_it(kind, llama, tmp_path):
    cls, save = KINDS[kind]
    save(llama, tmp_path / "ckpt")
    given = str(tmp_path / "ckpt" / "no-such-subdir")  # its parent is a real checkpoint: never fall back to it
    with pytest.raises(ConfigError) as e:
        cls.validate({"name": kind, "k": 2, "checkpoint": given})
    assert f"strategy.checkpoint={given!r} does not exist" in str(e.value)
    with pytest.raises(ConfigError, match="does not exist"):
        cls(_ctx(llama), k=2, checkpoint=given)
    cls.validate({"name": kind, "k": 2, "checkpoint": str(tmp_path / "ckpt" / "model.safetensors")})  # its weights file


@pytest.mark.parametrize("kind", KINDS)
def test_a_corrupt_safetensors_file_is_an_error_naming_it(kind, llama, tmp_path):
    cls, save = KINDS[kind]
    save(llama, tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])  # truncated
    pattern = re.escape(f"checkpoint weights {weights.resolve()} could not be read") + ".*allowed: a safetensors file"
    with pytest.raises(ConfigError, match=pattern):
        cls.validate({"name": kind, "k": 2, "checkpoint": str(tmp_path)})
    with pytest.raises(ConfigError, match=pattern):
        cls(_ctx(llama), k=2, checkpoint=str(tmp_path))


def test_a_pickle_checkpoint_is_refused_with_a_config_error(llama, tmp_path):
    _eagle(llama, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").unlink()
    torch.save(state, tmp_path / "pytorch_model.bin")
    EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(tmp_path)})  # plain tensors: allowed
    assert EagleProposer(_ctx(llama), k=2, checkpoint=str(tmp_path)).head is not None
    torch.save({**state, "note": Note()}, tmp_path / "pytorch_model.bin")
    bin_path = re.escape(str((tmp_path / "pytorch_model.bin").resolve()))
    with pytest.raises(ConfigError, match=bin_path + ".*pickled Python objects.*weights_only=True"):
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(tmp_path)})
    with pytest.raises(ConfigError, match=bin_path):
        read_weights(tmp_path / "pytorch_model.bin")


def test_a_config_json_that_does_not_parse_is_an_error_naming_it(tmp_path, llama):
    _medusa(llama, tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 48,')
    with pytest.raises(ConfigError, match=re.escape(str((tmp_path / "config.json").resolve())) + " could not be read as JSON"):
        MedusaProposer.validate({"name": "medusa", "k": 2, "checkpoint": str(tmp_path)})


def test_a_checkpoint_of_another_kind_is_an_error_naming_both_kinds(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"kind": "medusa", "hidden_size": 48, "num_heads": 2, "vocab_size": 101}')
    with pytest.raises(ConfigError, match="holds a 'medusa' drafter, not an 'eagle' one; use strategy=medusa with it, "
                                          "or give an 'eagle' checkpoint"):
        read_checkpoint_config(config, str(tmp_path), "eagle", EagleConfig)
    config.write_text('{"kind": "eagle", "hidden_size": 48}')
    with pytest.raises(ConfigError, match="holds an 'eagle' drafter, not a 'medusa' one; use strategy=eagle"):
        read_checkpoint_config(config, str(tmp_path), "medusa", MedusaConfig)


@pytest.mark.parametrize("key,value,allowed", [("draft_lm_head", "mine", "'own' or 'target'"),
                                               ("num_layers", 0, "an integer >= 1")])
def test_an_eagle_config_json_with_an_unknown_layout_is_refused_before_any_model_loads(tmp_path, llama, key, value,
                                                                                        allowed):
    import json

    _eagle(llama, tmp_path)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), key: value}))
    with pytest.raises(ConfigError) as e:
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(tmp_path)})
    assert f"strategy.checkpoint={str(tmp_path)!r}" in str(e.value) and f"{key}={value!r}; allowed: {allowed}" in str(e.value)
