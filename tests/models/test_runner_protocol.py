"""Every text runner, wrapped or not, satisfies models.runner.Runner (the VLM runners: tests/multimodal)."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize("kind", ["decoder", "transformers", "graphed", "draft"])
def test_narrow_runs_one_row_alone_and_leaves_the_others(kind):
    """Continuous batching's admission: a prefill inside narrow(1, 2) of a 3-row cache writes row 1 only, and a
    later decode step over all 3 rows gives row 1 what a runner holding that prompt alone gives."""
    model = tiny("tiny-llama").model
    make = {"decoder": lambda: DecoderRunner(model), "transformers": lambda: TransformersRunner(model),
            "graphed": lambda: GraphedRunner(DecoderRunner(model), capture=False),
            "draft": lambda: make_draft_runner(model, graphs=True)}[kind]
    old, new = torch.tensor([[7, 8, 9, 10, 11]]), torch.tensor([[3, 1, 4]])
    batch, alone = make(), make()
    batch.allocate(3, 12)
    alone.allocate(1, 12)
    batch(old.expand(3, -1), torch.arange(5).expand(3, -1), attn_len=5)  # every row holds the old prompt
    with batch.narrow(1, 2):
        got = batch(new, torch.arange(3)[None], attn_len=3).logits
    want = alone(new, torch.arange(3)[None], attn_len=3).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # a decode step: rows 0 and 2 continue the old prompt at position 5, row 1 the new one at position 3
    step = batch(torch.tensor([[12], [5], [12]]), torch.tensor([[5], [3], [5]]), attn_len=6).logits
    reference = make()
    reference.allocate(1, 12)
    reference(old, torch.arange(5)[None], attn_len=5)
    torch.testing.assert_close(step[1:2], alone(torch.tensor([[5]]), torch.tensor([[3]]), attn_len=4).logits,
                               atol=1e-5, rtol=1e-5)
    continued = reference(torch.tensor([[12]]), torch.tensor([[5]]), attn_len=6).logits
    for b in (0, 2):
        torch.testing.assert_close(step[b : b + 1], continued, atol=1e-5, rtol=1e-5)
