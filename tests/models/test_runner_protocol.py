"""Every text runner, wrapped or not, satisfies models.runner.Runner (the VLM runners: tests/multimodal)."""

from __future__ import annotations

import torch

from specbench_testing import assert_runner, tiny
from specbench.models.cuda_graphs import GraphedRunner
from specbench.models.decoder import DecoderRunner
from specbench.models.draft_runner import OutOfVocabGuard, make_draft_runner
from specbench.models.runner import Runner, TransformersRunner


def test_each_runner_class_is_a_runner():
    target = tiny("tiny-llama")
    runners = [DecoderRunner(target.model), TransformersRunner(target.model),
               GraphedRunner(DecoderRunner(target.model), capture=False), make_draft_runner(target.model),
               make_draft_runner(target.model, graphs=True)]
    assert isinstance(runners[-1], OutOfVocabGuard) and isinstance(runners[-1].runner, GraphedRunner)
    for runner in runners:
        assert_runner(runner)
        out = runner(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.arange(3).expand(2, 3), attn_len=3,
                     logits_at=torch.tensor([[2], [2]]), want_hidden=True, hidden_layers=(0,))
        assert out.logits.shape == (2, 1, runner.vocab_size) and out.hidden.shape[:2] == (2, 3)
        assert len(out.layer_hidden) == 1


def test_an_object_without_the_interface_is_not_a_runner():
    assert not isinstance(object(), Runner)
    assert not isinstance(torch.nn.Linear(2, 3), Runner)  # callable, but no allocate / cache
