"""Synthetic acceptance for speed studies with random weights (issue 5): NOT lossless.

Random-weight models agree on nothing, so real acceptance is ~0 and the speed of a strategy at a
realistic acceptance length cannot be measured with them. Here acceptance is drawn at given rates
instead of compared: draft i (1-based) is accepted, given that drafts 1..i-1 were, with probability
a_i; the number accepted is the length of the accepted prefix. The next token is then what the
real rule would emit at that position: the target's argmax (greedy) or a sample from p there.

- `synthetic_rule(...)`: same signature as `specbench.verify.rejection_sample`, a Verifier `rule`;
  it uses the Verifier's own uniforms (seeded by sampling.seed) for the draws.
- `synthetic_greedy_rule(...)`: the T = 0 twin, signature of `specbench.verify.greedy_verify`,
  with its own seeded generator on the device (no host sync).
- `SyntheticVerifier`: a Verifier that applies them at T = 0 and T > 0 alike.

An acceptance length AL (tokens per step = 1 + E[accepted]) at a given k converts to a constant
conditional rate a with (1 - a^(k+1)) / (1 - a) = AL (`rate_for_acceptance_length`). Results of
runs that use this must be marked `lossless: false`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from specbench.errors import ConfigError
from specbench.verify import SamplingParams, Verdict, Verifier, sample_from


def expected_acceptance_length(rates: Sequence[float]) -> float:
    """1 + E[accepted] for conditional per-position rates a_1..a_k."""
    total, reach = 1.0, 1.0
    for a in rates:
        reach *= a
        total += reach
    return total


def rate_for_acceptance_length(al: float, k: int) -> float:
    """The constant conditional rate a with 1 + a + ... + a^k = al (bisection; monotone in a)."""
    if k < 1:
        raise ConfigError(f"a synthetic acceptance length needs k >= 1 drafts, not k={k}")
    if not 1.0 <= al <= k + 1:
        raise ConfigError(f"verify.synthetic_acceptance_length={al!r} at k={k}; allowed: 1 <= AL <= k + 1 = {k + 1}")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if expected_acceptance_length([mid] * k) < al:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class _Rates:
    """Per-position conditional rates for any k, from an AL target or an explicit list."""

    def __init__(self, acceptance_length: float | None, per_position: Sequence[float] | None) -> None:
        if (acceptance_length is None) == (per_position is None):
            raise ConfigError("synthetic acceptance: give exactly one of acceptance_length and per_position")
        if per_position is not None:
            per_position = [float(a) for a in per_position]
            if not per_position or any(not 0.0 <= a <= 1.0 for a in per_position):
                raise ConfigError(f"synthetic per-position rates {per_position!r}; allowed: a non-empty list in [0, 1]")
        self.al = acceptance_length
        self.per_position = per_position
        self._cache: dict[tuple[int, torch.device], torch.Tensor] = {}

    def for_k(self, k: int) -> list[float]:
        if self.per_position is not None:  # the last rate repeats for positions past the list
            return [self.per_position[min(i, len(self.per_position) - 1)] for i in range(k)]
        return [rate_for_acceptance_length(self.al, k)] * k

    def tensor(self, k: int, device: torch.device) -> torch.Tensor:
        key = (k, device)
        if key not in self._cache:
            self._cache[key] = torch.tensor(self.for_k(k), dtype=torch.float64, device=device)
        return self._cache[key]


def _accepted(u: torch.Tensor, rates: torch.Tensor) -> torch.Tensor:
    return (u < rates).int().cumprod(dim=1).sum(dim=1).long()  # [B], the accepted prefix


def synthetic_rule(acceptance_length: float | None = None, per_position: list[float] | None = None,
                   seed: int = 0) -> Callable[..., Verdict]:
    """A Verifier rule (the signature of verify.rejection_sample) drawing acceptance at the given rates.

    The draws use the Verifier's uniforms (seeded by sampling.seed); `seed` is kept for symmetry
    with the greedy rule. The next token is sampled from p at the accepted position."""
    rates = _Rates(acceptance_length, per_position)

    def rule(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
             accept_uniforms: torch.Tensor, exponentials: torch.Tensor) -> Verdict:
        bsz, k = draft_tokens.shape
        if k == 0:
            accepted = torch.zeros(bsz, dtype=torch.long, device=draft_tokens.device)
        else:
            accepted = _accepted(accept_uniforms, rates.tensor(k, accept_uniforms.device))
        p_next = target_probs[torch.arange(bsz, device=target_probs.device), accepted].float()
        return Verdict(accepted=accepted, next_token=sample_from(p_next, exponentials).long())

    rule.synthetic = True  # type: ignore[attr-defined]
    rule.rates = rates  # type: ignore[attr-defined]
    return rule


def synthetic_greedy_rule(acceptance_length: float | None = None, per_position: list[float] | None = None,
                          seed: int = 0) -> Callable[[torch.Tensor, torch.Tensor], Verdict]:
    """The T = 0 twin (signature of verify.greedy_verify): draws at the rates, next = target argmax there."""
    rates = _Rates(acceptance_length, per_position)
    generators: dict[torch.device, torch.Generator] = {}

    def rule(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
        bsz, k = draft_tokens.shape
        dev = draft_tokens.device
        if k == 0:
            accepted = torch.zeros(bsz, dtype=torch.long, device=dev)
        else:
            if dev not in generators:
                generators[dev] = torch.Generator(device=dev)
                generators[dev].manual_seed(seed)
            u = torch.rand((bsz, k), device=dev, dtype=torch.float64, generator=generators[dev])
            accepted = _accepted(u, rates.tensor(k, dev))
        nxt = target_logits[torch.arange(bsz, device=dev), accepted].argmax(-1)
        return Verdict(accepted=accepted, next_token=nxt.long())

    rule.synthetic = True  # type: ignore[attr-defined]
    rule.rates = rates  # type: ignore[attr-defined]
    return rule


class SyntheticVerifier(Verifier):
    """A Verifier whose acceptance is synthetic at T = 0 and T > 0 (results are not lossless)."""

    lossless = False

    def __init__(self, params: SamplingParams, device: torch.device | str, acceptance_length: float | None = None,
                 per_position: list[float] | None = None) -> None:
        super().__init__(params, device, rule=synthetic_rule(acceptance_length, per_position, params.seed))
        self.greedy_rule = synthetic_greedy_rule(acceptance_length, per_position, params.seed)

    def __call__(self, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, target_logits: torch.Tensor) -> Verdict:
        if self.params.greedy:
            return self.greedy_rule(draft_tokens, target_logits)
        return super().__call__(draft_tokens, draft_probs, target_logits)


def make_verifier(params: SamplingParams, device: torch.device | str, synthetic_acceptance_length: float | None = None,
                  synthetic_per_position: list[float] | None = None) -> Verifier:
    """The run's Verifier: synthetic when either setting is given (then not lossless), else the real one."""
    if synthetic_acceptance_length is None and synthetic_per_position is None:
        return Verifier(params, device)
    return SyntheticVerifier(params, device, synthetic_acceptance_length, synthetic_per_position)
