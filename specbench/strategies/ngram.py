"""ngram: prompt lookup decoding. The draft is what followed the suffix the last time it occurred.

(Saxena 2023, "Prompt Lookup Decoding"; the `ngram` proposer of vLLM and transformers'
`prompt_lookup_num_tokens`.) For each row, take the longest suffix n-gram of its committed tokens
(prompt + output so far), n from max_n down to min_n, find its most recent earlier occurrence and
draft the K tokens that followed it. No model, no KV cache, no q: the verifier treats the draft as
one-hot, which is lossless at every temperature.

Padding. A continuation is shorter than K only when the occurrence ends less than K tokens before
the suffix, i.e. the sequence is repeating with period P = (distance between the two occurrences)
< K; the draft then continues that period (the K tokens the sequence would hold if the repetition
went on), which is what greedy decoding loops produce. A row with no match drafts its last
committed token K times (period 1). Padding only costs acceptance, never correctness: the verify
rule rejects any token the target would not produce. Note that every step verifies K drafts per
row whatever the match length, so a short or missing match still costs K verify slots.

Branches (strategy.tree=topk, top_k=m). The suffix often occurred several times with different
continuations; the draft is then a tree: the continuations of the best m candidate occurrences
(longest match, then most recent: lookup_drafts' order, so branch 0 is the chain draft), each K
tokens long with the same period padding, merged into a trie under the pending token (a shared
prefix is one node, so no two siblings carry the same token and no slot checks a token twice).
Every row and step verifies the same N = K * m nodes: the slots the merge frees, and those of a
row with fewer than m occurrences, hold padding nodes that repeat node 0 under the pending token,
never taken ahead of node 0 itself (branch_tree). The verifier walks the tree as one-hot drafts
(SpecInfer's multi-draft rule at T > 0), so trees are as lossless as the chain.

Matching runs on the host in numpy, vectorised over the batch: one [B, S] comparison per n-gram
position (max_n of them), then one argmax per row and branch (the trie: one [B, m, m, K] prefix
comparison); no device sync per row. The proposer keeps a host copy of the committed tokens and
appends each step's new tokens in commit() (one [B, K+1] copy to the host per step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from specbench.errors import ConfigError
from specbench.strategies.base import BuildContext, DecodeState, Draft, Proposer
from specbench.verify import Verdict


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def lookup_drafts(tokens: np.ndarray, lengths: np.ndarray, k: int, min_n: int, max_n: int) -> np.ndarray:
    """Prompt-lookup drafts for a batch of committed sequences (the pure core of this strategy).

    tokens: [B, S] int64, row b's committed tokens in tokens[b, :lengths[b]] (the rest is ignored);
    lengths: [B] int64, each >= 1. Returns [B, K] int64.

    A candidate occurrence is identified by its last position e (e <= L-2: strictly before the
    suffix's end); its match length is the number of tokens ending at e that equal the tokens
    ending at L-1, capped at max_n. The best candidate has the longest match (>= min_n), then the
    largest e (most recent). Its continuation starts at e+1 and runs with period P = L-1-e.
    """
    return lookup_branches(tokens, lengths, k, 1, min_n, max_n)[:, 0]


def lookup_branches(tokens: np.ndarray, lengths: np.ndarray, k: int, m: int, min_n: int, max_n: int) -> np.ndarray:
    """[B, m, K] int64: the continuations of each row's best m candidate occurrences, best first.

    Candidates, their order and their continuations are lookup_drafts' (its draft is branch 0). A row
    with fewer than m candidates repeats its best continuation in the places left (branch_tree merges
    them away); a row with none has the one no-match draft, its last token repeated.
    """
    bsz = tokens.shape[0]
    lengths = lengths.astype(np.int64)
    width = int(lengths.max()) - 1  # candidate end positions e in [0, width)
    rows = np.arange(bsz)
    if width <= 0:  # every row holds a single token: nothing earlier to match
        return np.repeat(tokens[rows, lengths - 1][:, None, None], m, axis=1).repeat(k, axis=2)
    ends = np.arange(width)  # [W] candidate e
    # match[b, e] stays True while tokens[b, e-j] == tokens[b, L-1-j] for j = 0..n-1, so the number
    # of j it was True for is the match length ending at e, capped at max_n
    match = np.ones((bsz, width), dtype=bool)
    length = np.zeros((bsz, width), dtype=np.int16 if max_n < 2**15 else np.int64)
    for j in range(min(max_n, width)):
        want = tokens[rows, np.maximum(lengths - 1 - j, 0)]  # [B] the suffix's j-th token from the end
        match[:, :j] = False  # tokens[b, e-j] does not exist for e < j
        match[:, j:] &= tokens[:, : width - j] == want[:, None]
        match[lengths - 1 - j < 0] = False  # a row shorter than the n-gram cannot match it
        length += match
    # a candidate needs match length >= min_n and e <= L-2 (strictly before the suffix's end); the
    # longest match wins, then the most recent (the last column holding the row's longest match);
    # each branch after the first takes the best candidate left
    length[(length < min_n) | (ends[None, :] > (lengths - 2)[:, None])] = 0
    top = np.zeros((bsz, m), dtype=np.int64)  # [B, m] candidate e, best first
    found = np.zeros((bsz, m), dtype=bool)
    for i in range(min(m, width)):
        longest = length.max(axis=1)  # [B]
        top[:, i] = width - 1 - (length == longest[:, None])[:, ::-1].argmax(axis=1)
        found[:, i] = longest > 0
        length[rows, top[:, i]] = 0
    best = np.where(found[:, 0], top[:, 0], lengths - 2)  # no match: e = L-2, period 1, the last token repeated
    end = np.where(found, top, best[:, None])  # [B, m]
    period = lengths[:, None] - 1 - end  # [B, m] >= 1
    idx = end[..., None] + 1 + np.arange(k) % period[..., None]  # [B, m, K], all < L
    return tokens[rows[:, None, None], idx]


def branch_tree(branches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge each row's m branches of K tokens [B, m, K] into one trie under the pending token.

    Returns tokens and parents [B, m * K] (parents -1 = the pending token). A node is a prefix of a
    branch that no earlier branch shares: nodes are laid out branch by branch, each branch's own
    nodes in depth order after its shared prefix, so the layout is topological and branch 0 is nodes
    0..K-1 (the chain). No two siblings carry the same token. The m * K - (distinct prefixes) slots
    left are padding: copies of node 0 under the pending token. A copy of an earlier sibling is
    never taken (T = 0: the first matching sibling wins; T > 0: rejecting node 0's token removes it
    from the residual), so padding fills slots without changing the verdict.
    """
    bsz, m, k = branches.shape
    n = m * k
    # same[b, j, i, d]: branches j and i agree on their first d + 1 tokens
    same = np.logical_and.accumulate(branches[:, :, None, :] == branches[:, None, :, :], axis=-1)  # [B, m, m, K]
    first = same.argmax(axis=2)  # [B, m, K] the first branch holding branch j's prefix to depth d (j at most)
    new = (first == np.arange(m)[None, :, None]).reshape(bsz, n)  # [B, m * K] branch-major: (j, d) at j * K + d
    index = np.cumsum(new, axis=1) - 1  # the node index of each new (j, d)
    node = np.take_along_axis(index, (first * k + np.arange(k)).reshape(bsz, n), 1).reshape(bsz, m, k)
    parent = np.concatenate([np.full((bsz, m, 1), -1), node[:, :, :-1]], axis=2).reshape(bsz, n)  # [B, m * K]
    tokens = np.repeat(branches[:, 0, :1], n, axis=1)  # [B, N] padding: node 0's token, under the pending token
    parents = np.full((bsz, n), -1, dtype=np.int64)
    r, f = np.nonzero(new)
    tokens[r, index[r, f]] = branches.reshape(bsz, n)[r, f]
    parents[r, index[r, f]] = parent[r, f]
    return tokens, parents


class NgramProposer(Proposer):
    """Drafts by looking up the committed tokens' own history; see the module docstring."""

    drafting = "lookup"

    def __init__(self, ctx: BuildContext, k: int, name: str = "ngram", min_n: int = 1, max_n: int = 3,
                 **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        self.validate({"name": name, "k": k, "min_n": min_n, "max_n": max_n})
        self.min_n, self.max_n = min_n, max_n
        self.host: np.ndarray = np.zeros((0, 0), dtype=np.int64)  # [B, S] committed tokens, host copy
        self.host_lengths: np.ndarray = np.zeros(0, dtype=np.int64)  # [B]

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        min_n, max_n = cfg.get("min_n", 1), cfg.get("max_n", 3)
        if not _is_int(min_n) or min_n < 1:
            raise ConfigError(f"strategy.min_n={min_n!r} for strategy 'ngram'; allowed: an integer >= 1 "
                              f"(the shortest suffix n-gram to look up)")
        if not _is_int(max_n) or max_n < min_n:
            raise ConfigError(f"strategy.max_n={max_n!r} with strategy.min_n={min_n!r} for strategy 'ngram'; "
                              f"allowed: an integer >= min_n (the longest suffix n-gram to look up)")

    def begin(self, state: DecodeState) -> None:
        super().begin(state)
        self.host = np.zeros((state.batch_size, state.max_len), dtype=np.int64)
        self.host_lengths = np.zeros(state.batch_size, dtype=np.int64)

    def admit(self, state: DecodeState, lo: int, hi: int, *prefill: Any) -> None:
        super().admit(state, lo, hi, *prefill)
        for b, row in zip(range(lo, hi), self.admitted_tokens(state, lo, hi)):  # prompts and the first token
            self.host[b, : len(row)] = row
        self.host_lengths[lo:hi] = state.lengths_host[lo:hi]

    def lookup(self, state: DecodeState) -> torch.Tensor | Draft:
        if self.tree == "topk" and self.top_k > 1:
            branches = lookup_branches(self.host, self.host_lengths, self.k, self.top_k, self.min_n, self.max_n)
            tree = torch.from_numpy(np.stack(branch_tree(branches))).to(self.device)  # [2, B, K * top_k], one copy
            return Draft(tokens=tree[0], parents=tree[1])
        drafts = lookup_drafts(self.host, self.host_lengths, self.k, self.min_n, self.max_n)  # [B, K]
        return torch.from_numpy(drafts).to(self.device)

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        super().commit(state, verdict, accepted, old_lengths)
        # the step wrote at most K+1 tokens per row from its old length on: copy that window only
        cols = np.minimum(np.array(old_lengths, dtype=np.int64)[:, None] + np.arange(self.k + 1), state.max_len - 1)  # [B, K+1]
        window = torch.from_numpy(cols).to(state.tokens.device)
        new = state.tokens.gather(1, window).cpu().numpy()  # the one device -> host copy of the step
        new_lengths = np.array(state.lengths_host, dtype=np.int64)
        keep = cols < new_lengths[:, None]  # committed slots only; finished rows keep their length
        rows = np.broadcast_to(np.arange(cols.shape[0])[:, None], cols.shape)
        self.host[rows[keep], cols[keep]] = new[keep]
        self.host_lengths = new_lengths
