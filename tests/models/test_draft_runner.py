"""models/draft_runner.py: the guard that maps ids a draft cannot embed, and when it is left out."""

from __future__ import annotations

import torch

from specbench.models.draft_runner import OutOfVocabGuard


class FakeRunner:
    """A stand-in runner (unit test only): records the tokens each forward gets."""

    vocab_size = 7

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, *args, **kwargs):
        self.seen.append(tokens)
        return tokens


def test_ids_past_the_drafts_vocabulary_are_mapped_where_the_target_has_them():
    tokens = torch.tensor([[1, 7, 8], [6, 0, 9]])  # [B=2, T=3]
    for target_vocab in (None, 0, 10):  # unknown, or a target larger than the draft's 7
        runner = FakeRunner()
        OutOfVocabGuard(runner, fallback_id=3, target_vocab=target_vocab)(tokens, torch.zeros_like(tokens))
        assert runner.seen[0].tolist() == [[1, 3, 3], [6, 0, 3]], target_vocab


def test_a_target_within_the_drafts_vocabulary_needs_no_mapping():
    """Every id the target can emit fits: the tokens go through as they are (the same tensor, no launch)."""
    tokens = torch.tensor([[1, 6, 2], [0, 5, 4]])
    for target_vocab in (5, 7):
        runner = FakeRunner()
        guard = OutOfVocabGuard(runner, fallback_id=3, target_vocab=target_vocab)
        guard(tokens, torch.zeros_like(tokens))
        assert not guard.needed and runner.seen[0] is tokens
