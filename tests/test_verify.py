"""verify.py: greedy acceptance, rejection sampling and the shaping of p by T / top-k / top-p.

Scripted distributions make acceptance exact to assert; the statistical tests compare the
emitted tokens' empirical distribution with the exact target distribution and show that the
same test fails on deliberately wrong acceptance rules (mutation checks).
"""

from __future__ import annotations

import pytest
import torch
from specbench_testing import chisquare_pvalue, resample_from_p

from specbench.errors import ConfigError
from specbench.verify import (
    SamplingParams,
    Verdict,
    Verifier,
    exp_noise,
    greedy_verify,
    logits_to_probs,
    rejection_sample,
    sample_from,
)

B, K, V = 3, 4, 7  # small, odd, distinct


def scripted_logits(argmaxes: list[list[int]], vocab: int = V) -> torch.Tensor:
    """[B, T, V] logits whose argmax at each position is given."""
    logits = torch.zeros(len(argmaxes), len(argmaxes[0]), vocab)
    for b, row in enumerate(argmaxes):
        for t, a in enumerate(row):
            logits[b, t, a] = 5.0
    return logits


def test_greedy_accepts_the_matching_prefix_and_emits_the_target_token():
    target = scripted_logits([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [6, 0, 0, 0, 0]])
    draft = torch.tensor([[1, 2, 3, 4], [1, 2, 0, 4], [5, 0, 0, 0]])
    v = greedy_verify(draft, target)
    assert v.accepted.tolist() == [4, 2, 0]  # all, first two, none
    assert v.next_token.tolist() == [5, 3, 6]  # bonus, correction, correction


def test_greedy_with_no_draft_is_argmax():
    target = scripted_logits([[3], [0], [6]])
    v = greedy_verify(torch.empty(3, 0, dtype=torch.long), target)
    assert v.accepted.tolist() == [0, 0, 0] and v.next_token.tolist() == [3, 0, 6]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(temperature=-0.5), "sampling.temperature=-0.5"),
        (dict(top_p=0.0), "sampling.top_p=0.0"),
        (dict(top_p=1.5), "(0, 1]"),
        (dict(top_k=-1), "sampling.top_k=-1"),
        (dict(top_k=2.5), "an integer >= 0"),
    ],
)
def test_bad_sampling_values_name_what_was_given_and_allowed(kwargs, fragment):
    with pytest.raises(ConfigError, match="allowed") as e:
        SamplingParams(**kwargs)
    assert fragment in str(e.value)


def test_top_k_and_top_p_shape_the_distribution():
    logits = torch.log(torch.tensor([[0.05, 0.4, 0.3, 0.15, 0.1]]))
    p = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(p, torch.tensor([[0, 0.4 / 0.7, 0.3 / 0.7, 0, 0]]))
    # top_p=0.75: 0.4 + 0.3 = 0.7 < 0.75, so 0.15 is kept too; 0.1 and 0.05 are dropped
    p = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.75))
    assert torch.allclose(p, torch.tensor([[0, 0.4, 0.3, 0.15, 0]]) / 0.85)
    # temperature sharpens: T=0.5 squares the ratios
    p = logits_to_probs(logits, SamplingParams(temperature=0.5))
    q = torch.tensor([[0.05, 0.4, 0.3, 0.15, 0.1]]) ** 2
    assert torch.allclose(p, q / q.sum(), atol=1e-6)


def test_sample_from_follows_the_weights():
    g = torch.Generator().manual_seed(0)
    w = torch.tensor([1.0, 0.0, 3.0, 6.0])
    n = 40_000
    draws = sample_from(w.expand(n, 4), torch.empty(n, 4).exponential_(generator=g))
    counts = torch.bincount(draws, minlength=4)
    assert chisquare_pvalue(counts, w / w.sum()) > 1e-4  # and index 1 (weight 0) never drawn


def test_exp_noise_is_exp1_and_seeded():
    """The CPU's Exp(1) noise (-log1p(-U) of float64 uniforms) against Exp(1)'s deciles and its far tail."""
    n = 200_000
    e = exp_noise((n // 5, 5), torch.Generator().manual_seed(3), "cpu")
    assert e.shape == (n // 5, 5) and e.dtype == torch.float32 and bool((e >= 0).all())
    again = exp_noise((n // 5, 5), torch.Generator().manual_seed(3), "cpu")
    assert torch.equal(e, again)
    edges = -torch.log1p(-torch.tensor([i / 10 for i in range(1, 10)] + [0.999], dtype=torch.float64))
    counts = torch.bincount(torch.bucketize(e.flatten().double(), edges), minlength=11).double()
    probs = torch.tensor([0.1] * 9 + [0.099, 0.001], dtype=torch.float64)
    assert chisquare_pvalue(counts, probs) > 1e-4


def _random_dists(rows: int, k: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(rows, k + 1, vocab, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(rows, k, vocab, generator=g) * 1.5, -1)
    return p, q


def _first_token_counts(rule, p: torch.Tensor, q: torch.Tensor | None, n: int, seed: int, one_hot_draft: int | None = None):
    """Repeat one verification n times (as n rows) and count the first emitted token."""
    g = torch.Generator().manual_seed(seed)
    k, vocab = p.shape[1] - 1, p.shape[2]
    pp = p.expand(n, -1, -1)
    if q is not None:
        qq = q.expand(n, -1, -1)
        draft = sample_from(qq, torch.empty(n, k, vocab).exponential_(generator=g))  # d_i ~ q_i
    else:
        qq = None
        draft = torch.full((n, k), one_hot_draft, dtype=torch.long)
    u = torch.rand(n, k, dtype=torch.float64, generator=g)
    e = torch.empty(n, vocab).exponential_(generator=g)
    v: Verdict = rule(draft, qq, pp, u, e)
    first = torch.where(v.accepted > 0, draft[:, 0], v.next_token)
    return torch.bincount(first, minlength=vocab).double(), v


def _swapped_ratio(draft, draft_probs, target_probs, u, e):
    """A second wrong rule, for the rule's own test only: p and q swapped (accept with min(1, q/p), residual max(0, q - p))."""
    k = draft.shape[1]
    return rejection_sample(draft, target_probs[:, :k], torch.cat([draft_probs, target_probs[:, k:]], 1), u, e)


@pytest.mark.parametrize("seed", [0, 1])
def test_rejection_sampling_keeps_the_target_distribution(seed):
    p, q = _random_dists(1, 3, V, seed)
    counts, v = _first_token_counts(rejection_sample, p, q, 60_000, seed)
    assert chisquare_pvalue(counts, p[0, 0]) > 1e-4
    # and it accepts with the analytic rate at position 0: sum_x min(p, q)
    rate = (v.accepted > 0).double().mean().item()
    assert abs(rate - torch.minimum(p[0, 0], q[0, 0]).sum().item()) < 0.01


def test_rejection_sampling_with_a_one_hot_draft_keeps_the_target_distribution():
    p, _ = _random_dists(1, 2, V, 3)
    counts, _ = _first_token_counts(rejection_sample, p, None, 60_000, 3, one_hot_draft=2)
    assert chisquare_pvalue(counts, p[0, 0]) > 1e-4


@pytest.mark.parametrize("wrong", [resample_from_p, _swapped_ratio])
def test_the_statistical_test_fails_on_a_wrong_rule(wrong):
    p, q = _random_dists(1, 3, V, 0)
    counts, _ = _first_token_counts(wrong, p, q, 60_000, 0)
    assert chisquare_pvalue(counts, p[0, 0]) < 1e-6


def test_identical_draft_accepts_everything_at_any_temperature():
    p, _ = _random_dists(B, K, V, 5)
    n = 5000
    g = torch.Generator().manual_seed(5)
    draft = sample_from(p[:, :K].repeat(n, 1, 1), torch.empty(B * n, K, V).exponential_(generator=g))
    u = torch.rand(B * n, K, dtype=torch.float64, generator=g)
    v = rejection_sample(draft, p[:, :K].repeat(n, 1, 1), p.repeat(n, 1, 1), u, torch.empty(B * n, V).exponential_(generator=g))
    assert v.accepted.eq(K).all()


def test_verifier_is_reproducible_for_a_seed_and_pads_a_smaller_draft_vocab():
    p_logits = torch.randn(B, K + 1, V, generator=torch.Generator().manual_seed(1))
    q = torch.softmax(torch.randn(B, K, V - 2, generator=torch.Generator().manual_seed(2)), -1)  # draft vocab V-2
    draft = q.argmax(-1)
    params = SamplingParams(temperature=0.8, top_k=5, top_p=0.9, seed=11)
    a = Verifier(params, "cpu")(draft, q, p_logits)
    b = Verifier(params, "cpu")(draft, q, p_logits)
    assert a.accepted.tolist() == b.accepted.tolist() and a.next_token.tolist() == b.next_token.tolist()


def test_argmax_last_is_argmax_with_ties_inf_and_nan():
    """verify.argmax_last (max(-1).indices on the CPU) gives argmax's index, the first maximal one, on 3,000 random
    [2, 3, V] cases with many ties, rows of -inf, a NaN, in float32 and bf16, V from 2 to 60,000."""
    from specbench.verify import argmax_last

    g = torch.Generator().manual_seed(0)
    for i in range(3000):
        v = int(torch.randint(2, 60000, (1,), generator=g))
        x = torch.randint(0, 5, (2, 3, v), generator=g).float()  # values 0..4: many ties
        if i % 3 == 0:
            x[..., ::2] = float("-inf")
        if i % 5 == 0:
            x[1, 2] = float("-inf")
        if i % 7 == 0:
            x[0, 0, v // 2] = float("nan")
        if i % 11 == 0:
            x = x.to(torch.bfloat16)
        assert torch.equal(argmax_last(x), x.argmax(-1)), (i, v)
