"""Lossless acceptance of draft tokens: greedy matching and rejection sampling (torch reference).

Contract (Leviathan et al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318):

- T = 0: accept the longest prefix of the draft that equals the target's argmax; the next token is
  the target's argmax right after it. The output equals target-only greedy decoding.
- T > 0: accept draft d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection
  sample from norm(max(0, p_i - q_i)); if all K are accepted, sample the bonus token from p_K.
  The output then follows p exactly. A draft that returns no q (greedy drafts, n-gram, Medusa
  chains) counts as q = one-hot(d), so d is accepted with probability p(d) and the residual is p
  with d removed.
- Temperature, top-k and top-p shape p and q before acceptance, exactly as for plain sampling
  (`logits_to_probs` is the one place that does it).

Randomness enters only as explicit inputs (uniforms for acceptance, exponentials for sampling),
so the Triton kernel in `specbench/kernels/rejection.py` can be checked against this reference
on identical noise. Sampling uses the exponential race: argmax(w / E) with E ~ Exp(1) per entry
draws index v with probability w_v / sum(w), for unnormalised w >= 0 (no cumsum, no sort, and
order-independent, hence bit-exact between implementations).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specbench.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn. temperature 0 means greedy; top_k 0 and top_p 1 mean no truncation."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ConfigError(f"sampling.temperature={self.temperature!r}; allowed: a number >= 0 (0 = greedy)")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ConfigError(f"sampling.top_p={self.top_p!r}; allowed: a number in (0, 1] (1 = no nucleus truncation)")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ConfigError(f"sampling.top_k={self.top_k!r}; allowed: an integer >= 0 (0 = no top-k truncation)")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"sampling.seed={self.seed!r}; allowed: an integer")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Verdict:
    """What verification decided for each row."""

    accepted: torch.Tensor  # [B] int64, number of draft tokens accepted (0..K)
    next_token: torch.Tensor  # [B] int64, the correction (n < K) or bonus (n == K) token


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Shape logits [..., V] into sampling probabilities [..., V] (float32): T, then top-k, then top-p."""
    if params.greedy:
        raise ValueError("logits_to_probs is for T > 0; greedy decoding uses argmax")
    x = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]  # [..., 1]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is < top_p
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_from(weights: torch.Tensor, exponentials: torch.Tensor) -> torch.Tensor:
    """Draw one index per row of non-negative weights [..., V] using Exp(1) noise [..., V]."""
    return torch.argmax(weights / exponentials, dim=-1)


def greedy_verify(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """T = 0 acceptance.

    draft_tokens: [B, K] int64; target_logits: [B, K+1, V] (position i predicts the token after
    the i-th input, i.e. scores draft token i for i < K and the bonus at K).
    """
    target_argmax = target_logits.argmax(dim=-1)  # [B, K+1]
    k = draft_tokens.shape[1]
    matches = (draft_tokens == target_argmax[:, :k]).int()  # [B, K]
    accepted = matches.cumprod(dim=1).sum(dim=1)  # [B], length of the matching prefix
    next_token = target_argmax.gather(1, accepted[:, None]).squeeze(1)
    return Verdict(accepted=accepted.long(), next_token=next_token.long())


def rejection_sample(
    draft_tokens: torch.Tensor,  # [B, K] int64
    draft_probs: torch.Tensor | None,  # [B, K, V] float, q; None = one-hot at draft_tokens
    target_probs: torch.Tensor,  # [B, K+1, V] float, p (already shaped by T / top-k / top-p)
    accept_uniforms: torch.Tensor,  # [B, K] float64 in [0, 1)
    exponentials: torch.Tensor,  # [B, V] float32, Exp(1) noise for the one token drawn per row
) -> Verdict:
    """T > 0 acceptance: the torch reference that the Triton kernel must equal."""
    bsz, k = draft_tokens.shape
    p_draft = target_probs[:, :k].gather(2, draft_tokens[..., None]).squeeze(2).double()  # [B, K]
    if draft_probs is None:
        q_draft = torch.ones_like(p_draft)
    else:
        q_draft = draft_probs.gather(2, draft_tokens[..., None]).squeeze(2).double()  # [B, K]
    # accept iff u < p/q, written without the division so q = 0 (impossible for a sampled draft) never NaNs
    ok = (accept_uniforms * q_draft < p_draft).int()  # [B, K]
    accepted = ok.cumprod(dim=1).sum(dim=1)  # [B]

    rows = torch.arange(bsz, device=draft_tokens.device)
    p_next = target_probs[rows, accepted].float()  # [B, V], p at the first rejection (or the bonus slot)
    rejected = accepted < k  # [B]
    if k > 0:
        at = accepted.clamp(max=k - 1)
        if draft_probs is None:  # one-hot at the draft token (scatter keeps it CUDA-graph capturable)
            q_next = torch.zeros_like(p_next).scatter_(1, draft_tokens.gather(1, at[:, None]), 1.0)
        else:
            q_next = draft_probs[rows, at].float()  # [B, V]
        residual = (p_next - q_next).clamp_min(0.0)
        # p == q on the support can leave no residual mass; then rejection had probability 0 anyway
        has_mass = residual.sum(-1, keepdim=True) > 0
        residual = torch.where(has_mass, residual, p_next)
        weights = torch.where(rejected[:, None], residual, p_next)
    else:
        weights = p_next
    next_token = sample_from(weights, exponentials)
    return Verdict(accepted=accepted.long(), next_token=next_token.long())


class Verifier:
    """Draws the noise for rejection sampling from one seeded generator and applies the rule.

    One Verifier per run: the same seed gives the same tokens for the same batches.
    """

    def __init__(self, params: SamplingParams, device: torch.device | str, rule: Callable[..., Verdict] | None = None) -> None:
        self.params = params
        self.rule = rule or rejection_sample  # same signature as rejection_sample (the Triton kernel plugs in here)
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(params.seed)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.params)

    def exponentials(self, shape: tuple[int, ...]) -> torch.Tensor:
        e = torch.empty(shape, device=self.device, dtype=torch.float32)
        return e.exponential_(generator=self.generator)

    def __call__(
        self,
        draft_tokens: torch.Tensor,  # [B, K]
        draft_probs: torch.Tensor | None,  # [B, K, V] or None
        target_logits: torch.Tensor,  # [B, K+1, V]
    ) -> Verdict:
        if self.params.greedy:
            return greedy_verify(draft_tokens, target_logits)
        bsz, k = draft_tokens.shape
        vocab = target_logits.shape[-1]
        if draft_probs is not None and draft_probs.shape[-1] < vocab:
            # a smaller draft vocabulary puts zero mass on the target-only ids
            draft_probs = torch.nn.functional.pad(draft_probs, (0, vocab - draft_probs.shape[-1]))
        target_probs = self.probs(target_logits)
        u = torch.rand((bsz, k), device=self.device, dtype=torch.float64, generator=self.generator)
        return self.rule(draft_tokens, draft_probs, target_probs, u, self.exponentials((bsz, vocab)))
