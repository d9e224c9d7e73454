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


def exp_noise(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str) -> torch.Tensor:
    """Exp(1) noise of `shape` (float32) from `generator`. On the CPU it is -log1p(-U) of float64 uniforms, exact up
    to 2^-53 and about 3x faster there than `exponential_` over a 49k-token vocabulary; elsewhere `exponential_`."""
    device = torch.device(device)
    if device.type == "cpu":
        u = torch.rand(shape, generator=generator, dtype=torch.float64)
        return u.neg_().log1p_().neg_().float()
    return torch.empty(shape, device=device, dtype=torch.float32).exponential_(generator=generator)


def argmax_last(x: torch.Tensor) -> torch.Tensor:
    """x.argmax(-1). On the CPU as x.max(-1).indices, which gives the same index (the first maximal one; a NaN's if
    there is one) and is faster there: over 49,152 ids 23 us against argmax's 63 us, over [1, 3, 49152] 41 against
    123 us (torch 2.13, the 2-core Intel Xeon; experiments/cpu/intel-run3/argmax_forms.txt). The same on 3,000 random cases with
    ties, -inf and NaN (tests/test_verify.py)."""
    return x.max(-1).indices if x.device.type == "cpu" else x.argmax(-1)


def sample_from(weights: torch.Tensor, exponentials: torch.Tensor) -> torch.Tensor:
    """Draw one index per row of non-negative weights [..., V] using Exp(1) noise [..., V]."""
    return argmax_last(weights / exponentials)


def greedy_verify(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """T = 0 acceptance.

    draft_tokens: [B, K] int64; target_logits: [B, K+1, V] (position i predicts the token after
    the i-th input, i.e. scores draft token i for i < K and the bonus at K).
    """
    target_argmax = argmax_last(target_logits)  # [B, K+1]
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


@dataclass
class TreeVerdict:
    """What verification of a tree decided for each row: the accepted root-to-leaf path and the next token."""

    path: torch.Tensor  # [B, N] int64 node indices of the accepted path in depth order; -1 past `accepted`
    accepted: torch.Tensor  # [B] int64 path length (0..depth of the tree)
    next_token: torch.Tensor  # [B] int64 correction (a rejection under the last accepted node) or bonus token


def raise_if_not_topological(parents: torch.Tensor) -> None:
    """Trees are given in topological order: node i's parent is -1 (the pending token) or a node j < i. The
    single pass of the tree verifiers relies on it (a node's children come after it, siblings in draft order)."""
    n = parents.shape[1]
    index = torch.arange(n, device=parents.device)
    if bool(((parents < -1) | (parents >= index)).any()):
        raise ValueError(f"tree parents must satisfy -1 <= parents[b, i] < i (topological order); got {parents.tolist()}")


def tree_layout(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For a verify forward over [pending token, node 0..N-1]: depth [B, 1+N] (0 for the pending token) and the
    ancestor mask [B, 1+N, 1+N] (column u is an ancestor of, or is, row t). Parents must be topological.

    Pointer jumping, no loop over the nodes: each row starts as {itself, its parent}; then, log2(N) times, a row
    takes in the row of the ancestor `jump` points to and `jump` doubles its distance (the root points to itself)."""
    bsz, n = parents.shape
    dev = parents.device
    up = torch.cat([torch.zeros((bsz, 1), dtype=torch.long, device=dev), parents + 1], dim=1)  # [B, 1+N] parent column
    eye = torch.eye(n + 1, dtype=torch.bool, device=dev).expand(bsz, -1, -1)
    mask = eye | torch.zeros_like(eye).scatter_(2, up[..., None], True)
    jump = up
    for _ in range(max(1, n.bit_length())):  # after j rounds a row holds its ancestors up to 2^j levels up
        mask = mask | mask.gather(1, jump[..., None].expand(-1, -1, n + 1))
        jump = jump.gather(1, jump)
    return mask.sum(-1) - 1, mask


def greedy_tree_verify(draft_tokens: torch.Tensor, parents: torch.Tensor, target_logits: torch.Tensor,
                       layout: tuple[torch.Tensor, torch.Tensor] | None = None) -> TreeVerdict:
    """T = 0 acceptance of a tree.

    draft_tokens, parents: [B, N]; target_logits: [B, N+1, V] (column 0 follows the pending token, column i+1
    follows node i); layout: tree_layout(parents) when the caller has it. From the pending token down, move to the
    first child (in draft order) whose token is the target's argmax after its parent, while there is one: the path
    is the target's own greedy continuation, so the output equals target-only greedy decoding. A chain (parents
    -1, 0, 1, ...) gives greedy_verify's prefix.

    No loop over the nodes: a node matches when its token is the argmax after its parent; it is taken when it
    matches and no earlier sibling does; the path is the nodes whose ancestors (and themselves) are all taken,
    one per depth, put in order by depth.
    """
    bsz, n = draft_tokens.shape
    dev = draft_tokens.device
    depth, mask = tree_layout(parents) if layout is None else layout  # [B, 1+N], [B, 1+N, 1+N]
    target_argmax = argmax_last(target_logits)  # [B, N+1]
    match = draft_tokens == target_argmax.gather(1, parents + 1)  # [B, N]
    index = torch.arange(n, device=dev)
    earlier_sibling = (parents[:, None, :] == parents[:, :, None]) & (index[None, :] < index[:, None])[None]  # [B, N, N]
    taken = match & ~(earlier_sibling & match[:, None, :]).any(-1)  # [B, N]
    on_path = ~(mask[:, 1:, 1:] & ~taken[:, None, :]).any(-1)  # [B, N] every ancestor-or-self taken
    length = on_path.sum(-1)  # [B] one node per depth 1..length
    slot = torch.where(on_path, depth[:, 1:] - 1, n)  # [B, N] a path node's place by depth; n: dropped
    path = torch.full((bsz, n + 1), -1, dtype=torch.long, device=dev).scatter_(1, slot, index.expand(bsz, n))
    node = path.gather(1, (length - 1).clamp_min(0)[:, None])[:, 0]  # -1 when nothing is accepted (or N = 0)
    next_token = target_argmax.gather(1, (node + 1)[:, None])[:, 0]
    return TreeVerdict(path=path[:, :n], accepted=length, next_token=next_token)


def tree_rejection_sample(
    draft_tokens: torch.Tensor,  # [B, N] int64
    parents: torch.Tensor,  # [B, N] int64, topological (raise_if_not_topological)
    draft_probs: torch.Tensor | None,  # [B, N, V] q each node was drawn from; None = one-hot at each node's token
    target_probs: torch.Tensor,  # [B, N+1, V] p after the pending token (column 0) and after each node (i+1)
    accept_uniforms: torch.Tensor,  # [B, N] float64 in [0, 1), one per node
    exponentials: torch.Tensor,  # [B, V] float32, Exp(1) noise for the one token drawn per row
) -> TreeVerdict:
    """T > 0 acceptance of a tree: recursive rejection sampling over siblings (SpecInfer, arXiv 2305.09781).

    At the current node (first the pending token) with target distribution r = p, try its children in draft
    order: accept child x drawn from q with probability min(1, r(x) / q(x)) and descend (r = p after x); on a
    rejection r = norm(max(0, r - q)) and try the next sibling. When every child is rejected, or the node has
    none, draw the next token from r. The output follows p exactly when the children of a node are independent
    draws from one q (their rows of draft_probs equal) or distinct tokens with no q (one-hot: x is accepted with
    probability r(x) and removed from r on rejection, i.e. sampling p by elimination). A chain is the case of one
    child per node and gives rejection_sample's verdict on the same noise.
    """
    bsz, n = draft_tokens.shape
    dev = draft_tokens.device
    rows = torch.arange(bsz, device=dev)
    node = torch.full((bsz,), -1, dtype=torch.long, device=dev)
    path = torch.full((bsz, n), -1, dtype=torch.long, device=dev)
    length = torch.zeros(bsz, dtype=torch.long, device=dev)
    # r: [B, V] what the next token is drawn from if no child of `node` is accepted, unnormalised after a
    # rejection (mass [B] its sum; 1 for a column of p), so that a chain draws exactly what rejection_sample draws
    r = target_probs[:, 0].float()
    mass = torch.ones(bsz, dtype=torch.float64, device=dev)
    for j in range(n):
        x = draft_tokens[:, j]  # [B]
        if draft_probs is None:
            q = torch.zeros_like(r).scatter_(1, x[:, None], 1.0)
        else:
            q = draft_probs[:, j].float()
        child = parents[:, j] == node  # [B] rows for which node j is a child of the current node
        # accept iff u < (r(x)/mass)/q(x), written without the division (q(x) = 0 is impossible for a drawn token)
        q_x, r_x = q.gather(1, x[:, None])[:, 0].double(), r.gather(1, x[:, None])[:, 0].double()
        ok = child & (accept_uniforms[:, j] * q_x * mass < r_x)
        # on rejection: norm(max(0, r/mass - q)), kept as max(0, r - mass*q) and its sum
        residual = (r - (mass[:, None] * q).float()).clamp_min(0.0)
        left = residual.double().sum(-1)
        has_mass = left > 0  # none left: the rejection had probability 0, keep r
        rejected = child & ~ok & has_mass
        r = torch.where(ok[:, None], target_probs[:, j + 1].float(), torch.where(rejected[:, None], residual, r))
        mass = torch.where(ok, torch.ones_like(mass), torch.where(rejected, left, mass))
        path[rows, length] = torch.where(ok, j, path[rows, length])
        length = length + ok.long()
        node = torch.where(ok, j, node)
    return TreeVerdict(path=path, accepted=length, next_token=sample_from(r, exponentials))


class Verifier:
    """Draws the noise for rejection sampling from one seeded generator and applies the rule.

    One Verifier per run: the same seed gives the same tokens for the same batches.
    """

    def __init__(self, params: SamplingParams, device: torch.device | str, rule: Callable[..., Verdict] | None = None,
                 tree_rule: Callable[..., TreeVerdict] | None = None,
                 greedy_tree_rule: Callable[..., TreeVerdict] | None = None) -> None:
        self.params = params
        # the Triton kernels (specbench.kernels.rejection, .tree_rejection) plug in here, with the same signatures
        self.rule = rule or rejection_sample
        self.tree_rule = tree_rule or tree_rejection_sample
        self.greedy_tree_rule = greedy_tree_rule or greedy_tree_verify
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(params.seed)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.params)

    def exponentials(self, shape: tuple[int, ...]) -> torch.Tensor:
        return exp_noise(shape, self.generator, self.device)

    def tree(
        self,
        draft_tokens: torch.Tensor,  # [B, N]
        parents: torch.Tensor,  # [B, N] topological
        draft_probs: torch.Tensor | None,  # [B, N, V] or None (one-hot)
        target_logits: torch.Tensor,  # [B, N+1, V]
        layout: tuple[torch.Tensor, torch.Tensor] | None = None,  # tree_layout(parents), when the caller has it
    ) -> TreeVerdict:
        """Verify a tree: the greedy tree rule at T = 0, else the tree rejection rule on this verifier's noise."""
        if self.params.greedy:
            return self.greedy_tree_rule(draft_tokens, parents, target_logits, layout)
        bsz, n = draft_tokens.shape
        vocab = target_logits.shape[-1]
        if draft_probs is not None and draft_probs.shape[-1] < vocab:
            draft_probs = torch.nn.functional.pad(draft_probs, (0, vocab - draft_probs.shape[-1]))
        u = torch.rand((bsz, n), device=self.device, dtype=torch.float64, generator=self.generator)
        return self.tree_rule(draft_tokens, parents, draft_probs, self.probs(target_logits), u,
                              self.exponentials((bsz, vocab)))

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
