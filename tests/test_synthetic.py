"""Synthetic acceptance: the realised acceptance length matches the requested one."""

from __future__ import annotations

import pytest
import torch

from specbench.errors import ConfigError
from specbench.synthetic import (SyntheticVerifier, expected_acceptance_length, make_verifier,
                                 rate_for_acceptance_length, synthetic_greedy_rule, synthetic_rule)
from specbench.verify import SamplingParams, Verifier


@pytest.mark.parametrize("al,k", [(2.8, 3), (2.8, 5), (1.0, 2), (4.0, 3), (1.5, 1)])
def test_rate_solves_the_acceptance_length(al, k):
    a = rate_for_acceptance_length(al, k)
    assert 0 <= a <= 1
    assert expected_acceptance_length([a] * k) == pytest.approx(al, abs=1e-9)


def test_bad_settings():
    with pytest.raises(ConfigError):
        rate_for_acceptance_length(4.5, 3)
    with pytest.raises(ConfigError):
        synthetic_rule()
    with pytest.raises(ConfigError):
        synthetic_rule(2.0, [0.5])
    with pytest.raises(ConfigError):
        synthetic_rule(per_position=[1.5])


def _realised_al(verifier, k: int, steps: int = 4000, bsz: int = 8, vocab: int = 50):
    g = torch.Generator().manual_seed(1)
    total = 0
    for _ in range(steps // bsz):
        draft = torch.randint(0, vocab, (bsz, k), generator=g)
        logits = torch.randn(bsz, k + 1, vocab, generator=g)
        probs = torch.softmax(torch.randn(bsz, k, vocab, generator=g), -1)
        v = verifier(draft, probs, logits)
        assert ((0 <= v.accepted) & (v.accepted <= k)).all()
        total += int(v.accepted.sum()) + bsz
    return total / (steps // bsz * bsz)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("al,k", [(2.8, 3), (2.8, 5), (1.6, 2)])
def test_realised_acceptance_length(temperature, al, k):
    v = SyntheticVerifier(SamplingParams(temperature=temperature, seed=3), "cpu", acceptance_length=al)
    got = _realised_al(v, k)
    # AL's standard deviation per step is < k; over 4000 steps the standard error is < 0.08 for k=5
    assert got == pytest.approx(al, abs=0.12)


def test_per_position_rates():
    v = SyntheticVerifier(SamplingParams(seed=0), "cpu", per_position=[0.9, 0.5, 0.2])
    assert _realised_al(v, 3) == pytest.approx(expected_acceptance_length([0.9, 0.5, 0.2]), abs=0.1)
    v = SyntheticVerifier(SamplingParams(seed=0), "cpu", per_position=[1.0])
    assert _realised_al(v, 4, steps=200) == 5.0


def test_next_token_is_the_target_choice_at_the_accepted_position():
    rule = synthetic_greedy_rule(per_position=[1.0, 0.0])
    logits = torch.randn(4, 3, 20)
    v = rule(torch.zeros(4, 2, dtype=torch.long), logits)
    assert (v.accepted == 1).all()
    assert torch.equal(v.next_token, logits[:, 1].argmax(-1))
    r = synthetic_rule(per_position=[0.0])
    p = torch.zeros(2, 2, 5)
    p[:, 0, 3] = 1.0
    v = r(torch.zeros(2, 1, dtype=torch.long), None, p, torch.rand(2, 1, dtype=torch.float64), torch.ones(2, 5))
    assert (v.accepted == 0).all() and (v.next_token == 3).all()


def test_make_verifier():
    assert type(make_verifier(SamplingParams(), "cpu")) is Verifier
    v = make_verifier(SamplingParams(), "cpu", synthetic_acceptance_length=2.8)
    assert isinstance(v, SyntheticVerifier) and v.lossless is False
