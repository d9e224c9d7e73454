"""LoadedModel's derived facts (EOS ids) on a tiny random model."""

from __future__ import annotations

from types import SimpleNamespace

from specbench_testing import tiny
from specbench.models.loading import LoadedModel


def test_eos_ids_join_the_tokenizer_and_the_generation_config():
    target = tiny("tiny-llama")
    target.model.generation_config.eos_token_id = [7, 11]  # Llama 3 style: a list
    model = LoadedModel(spec=target.spec, model=target.model, tokenizer=SimpleNamespace(eos_token_id=3))
    assert model.eos_ids == {3, 7, 11}
    target.model.generation_config.eos_token_id = None
    assert LoadedModel(spec=target.spec, model=target.model, tokenizer=SimpleNamespace()).eos_ids == set()
