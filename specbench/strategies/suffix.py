"""suffix: SuffixDecoding (Oliaro et al., arXiv 2411.04975; the `suffix` method of Snowflake ArcticInference).

Model-free drafting from suffix trees. Two indexes hold every substring of at most `max_depth` tokens with its
number of occurrences (a suffix trie with a depth cap, `SuffixTrie`):

- a per-request trie over the row's prompt + output so far, extended by each step's committed tokens in commit()
  (O(max_depth) per token: the nodes of the sequence's last max_depth - 1 suffixes are kept and each grows by one);
- a global trie over the outputs of the run's earlier requests, a request inserted when its row finishes and the
  oldest evicted (its counts taken back) beyond `max_cached_requests`. It lives in the proposer, which run()
  builds once per job and reuses across batches; reseed() clears it, because run() calls reseed() after the
  untimed warm-up: the warm-up's outputs never feed the timed run.

Each step, per row and per trie: match the longest suffix of the committed tokens (at most `max_match` tokens)
that occurred before with a continuation, and from its node grow a speculation tree best-first (`speculate`): a
child's probability is its count over the counts of all of its parent's continuations, a path's is the product;
the likeliest open node is added next, until `num_nodes` nodes (a chain: k), depth k, a path probability under
`min_token_prob`, or max_spec_factor * (match length) nodes (the paper's alpha: short matches speculate little).
The row drafts whichever trie's tree scores higher, the score being the expected number of accepted tokens under
those frequencies (the sum of the nodes' path probabilities), as the paper does. Unlike ArcticInference, which
scores every match length, only the longest match per trie is scored.

Shapes. tree=chain drafts the likeliest path, K tokens per row; tree=dynamic drafts the tree, `num_nodes` nodes per
row, at most K deep and at most top_k children per node. Every row and step verifies the same N (K or num_nodes):
a shorter chain repeats its last token, a smaller tree is padded like ngram's with copies of node 0 under the
pending token (never taken ahead of node 0: at T = 0 the first matching sibling wins; at T > 0 rejecting node 0's
token removes it from the residual), and a row without a match drafts its last committed token N times. Drafts
are one-hot (no q), lossless at every temperature.

The host work is plain Python (dicts per trie node) with one device -> host copy per step in commit().
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from specbench.errors import ConfigError
from specbench.strategies.base import BuildContext, DecodeState, Draft, Proposer
from specbench.verify import Verdict

ROOT = 0
TREES = ("chain", "dynamic")  # strategy.tree for suffix


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class SuffixTrie:
    """Every substring of at most `max_depth` tokens of the inserted sequences, with its number of occurrences.

    Node 0 is the root (the empty string); a node's count is the occurrences of its string, `total` the sum of
    its children's counts (the occurrences that continue). Freed nodes (count 0 after `remove`) are reused.
    """

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.kids: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
        self.total: list[int] = [0]
        self.token: list[int] = [-1]
        self.free: list[int] = []

    def __len__(self) -> int:
        """Nodes in use, the root included."""
        return len(self.kids) - len(self.free)

    def _bump(self, node: int, token: int) -> int:
        child = self.kids[node].get(token)
        if child is None:
            if self.free:
                child = self.free.pop()
                self.count[child], self.total[child], self.token[child] = 0, 0, token
            else:
                child = len(self.kids)
                self.kids.append({})
                self.count.append(0)
                self.total.append(0)
                self.token.append(token)
            self.kids[node][token] = child
        self.count[child] += 1
        self.total[node] += 1
        return child

    def extend(self, active: list[int], token: int) -> list[int]:
        """Append `token` to a sequence whose suffixes of lengths 1, 2, ... (< max_depth) are the nodes `active`:
        counts the new substrings ending at it, and returns the new suffixes' nodes (same convention)."""
        new = [self._bump(ROOT, token)]
        new.extend(self._bump(node, token) for node in active[: self.max_depth - 1])
        return new[: self.max_depth - 1]

    def insert(self, seq: Sequence[int]) -> None:
        active: list[int] = []
        for token in seq:
            active = self.extend(active, token)

    def remove(self, seq: Sequence[int]) -> None:
        """Take back one insert(seq): every substring's count drops by one; nodes at count 0 are freed."""
        for i in range(len(seq)):
            node, path = ROOT, []
            for token in seq[i : i + self.max_depth]:
                child = self.kids[node][token]
                self.count[child] -= 1
                self.total[node] -= 1
                path.append((node, child))
                node = child
            for parent, child in path:  # the first node at 0 is detached; the path below it is at 0 too
                if self.count[child] == 0:
                    if parent == ROOT or self.count[parent] > 0:
                        del self.kids[parent][self.token[child]]
                    self.kids[child] = {}
                    self.free.append(child)

    def walk(self, seq: Sequence[int]) -> int | None:
        """The node of `seq`, or None when it never occurred."""
        node: int | None = ROOT
        for token in seq:
            node = self.kids[node].get(token)
            if node is None:
                return None
        return node

    def suffix_nodes(self, seq: Sequence[int], longest: int) -> list[int]:
        """Nodes of seq's suffixes of lengths 1, 2, ..., as long as they occur (at most `longest`)."""
        nodes = []
        for n in range(1, min(longest, len(seq)) + 1):
            node = self.walk(seq[len(seq) - n :])
            if node is None:  # a substring's suffixes are substrings too: no longer suffix occurs either
                break
            nodes.append(node)
        return nodes

    def advance(self, nodes: list[int], token: int, longest: int) -> list[int]:
        """suffix_nodes after appending `token`, from the nodes before it, without inserting anything."""
        new = []
        for node in [ROOT, *nodes[: longest - 1]]:
            child = self.kids[node].get(token)
            if child is None:
                break
            new.append(child)
        return new


def longest_match(trie: SuffixTrie, nodes: list[int], max_match: int) -> tuple[int, int]:
    """(node, match length) of the longest suffix in `nodes` (lengths 1, 2, ...) of at most max_match tokens
    that has a continuation; (-1, 0) when none has."""
    for n in range(min(max_match, len(nodes)), 0, -1):
        if trie.total[nodes[n - 1]] > 0:
            return nodes[n - 1], n
    return -1, 0


def speculate(trie: SuffixTrie, node: int, max_nodes: int, depth: int, min_prob: float,
              width: int) -> tuple[list[int], list[int], list[float]]:
    """The speculation tree under `node`, grown best-first: each time the open node of highest path probability
    (ties: the earlier opened), while its probability is >= min_prob, until max_nodes nodes; nodes at most `depth`
    deep, at most `width` children (the most frequent) per node. Returns tokens, parents (-1 = under `node`) and
    path probabilities, in the order added (topological)."""
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    heap: list[tuple[float, int, int, int, int]] = []  # (-prob, order, trie node, parent index, depth)
    order = 0

    def open_children(at: int, prob: float, index: int, d: int) -> None:
        nonlocal order
        kids = trie.kids[at]
        if not kids or d > depth:
            return
        best = heapq.nlargest(width, kids.values(), key=trie.count.__getitem__) if len(kids) > width else kids.values()
        for child in best:
            heapq.heappush(heap, (-prob * trie.count[child] / trie.total[at], order, child, index, d))
            order += 1

    open_children(node, 1.0, -1, 1)
    while heap and len(tokens) < max_nodes:
        neg, _, child, parent, d = heapq.heappop(heap)
        if -neg < min_prob:
            break
        tokens.append(trie.token[child])
        parents.append(parent)
        probs.append(-neg)
        open_children(child, -neg, len(tokens) - 1, d + 1)
    return tokens, parents, probs


def pad_tree(tokens: list[int], parents: list[int], n: int, last: int) -> tuple[list[int], list[int]]:
    """A tree of <= n nodes padded to n: copies of node 0 under the pending token (a row without nodes: `last`,
    its last committed token)."""
    fill = tokens[0] if tokens else last
    return tokens + [fill] * (n - len(tokens)), parents + [-1] * (n - len(parents))


def pad_chain(tokens: list[int], k: int, last: int) -> list[int]:
    """A chain of <= k tokens padded to k by repeating its last token (`last` for an empty chain)."""
    return tokens + [tokens[-1] if tokens else last] * (k - len(tokens))


class SuffixProposer(Proposer):
    """Drafts from suffix tries over the request and the run's earlier outputs; see the module docstring."""

    drafting = "lookup"
    reads_other_requests = True  # the global trie holds finished requests' outputs

    def __init__(self, ctx: BuildContext, k: int, name: str = "suffix", max_depth: int = 24, max_match: int = 16,
                 max_spec_factor: float = 1.0, min_token_prob: float = 0.1, max_cached_requests: int = 1000,
                 **options: Any) -> None:
        settings = {"max_depth": max_depth, "max_match": max_match, "max_spec_factor": max_spec_factor,
                    "min_token_prob": min_token_prob, "max_cached_requests": max_cached_requests}
        self._check(name, settings, k)
        self.max_depth, self.max_match = max_depth, max_match
        self.max_spec_factor, self.min_token_prob = float(max_spec_factor), float(min_token_prob)
        self.max_cached_requests = max_cached_requests
        self.global_trie = SuffixTrie(max_depth)
        self.cached: deque[list[int]] = deque()  # the global trie's requests (outputs), oldest first
        super().__init__(ctx, k, name, **options)  # calls reseed(), which clears the (empty) global trie
        # per row of the current batch
        self.seqs: list[list[int]] = []  # committed tokens (prompt + output)
        self.tries: list[SuffixTrie] = []  # the per-request tries
        self.local: list[list[int]] = []  # nodes of each row's suffixes in its own trie
        self.shared: list[list[int]] = []  # nodes of each row's suffixes in the global trie (<= max_match long)
        self.prompt_lengths: list[int] = []
        self.running: list[bool] = []

    @property
    def nodes_per_step(self) -> int:
        return self.num_nodes if self.tree == "dynamic" else self.k

    def reseed(self) -> None:
        """Also empties the global trie: run() calls reseed() after the untimed warm-up, whose outputs (cut short,
        on the run's own prompts) must not feed the timed run's lookups."""
        super().reseed()
        self.global_trie = SuffixTrie(self.max_depth)
        self.cached.clear()

    # -- settings --------------------------------------------------------------------------------------------
    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        keys = ("max_depth", "max_match", "max_spec_factor", "min_token_prob", "max_cached_requests")
        defaults = (24, 16, 1.0, 0.1, 1000)
        cls._check(cfg.get("name", "suffix"), {key: cfg.get(key, d) for key, d in zip(keys, defaults)}, cfg.get("k"))

    @staticmethod
    def _check(name: str, s: Mapping[str, Any], k: Any) -> None:
        depth, match = s["max_depth"], s["max_match"]
        if not _is_int(depth) or depth < 2:
            raise ConfigError(f"strategy.max_depth={depth!r} for strategy {name!r}; allowed: an integer >= 2 (the "
                              f"longest substring the suffix tries hold: match + continuation)")
        if not _is_int(match) or not 1 <= match < depth:
            raise ConfigError(f"strategy.max_match={match!r} for strategy {name!r} with max_depth={depth}; allowed: "
                              f"an integer from 1 to max_depth - 1 = {depth - 1} (a match of m tokens leaves "
                              f"max_depth - m for the draft; k={k})")
        factor, prob, cached = s["max_spec_factor"], s["min_token_prob"], s["max_cached_requests"]
        if not _is_number(factor) or not factor > 0:
            raise ConfigError(f"strategy.max_spec_factor={factor!r} for strategy {name!r}; allowed: a number > 0 "
                              f"(at most max_spec_factor * match length nodes per draft)")
        if not _is_number(prob) or not 0 <= prob <= 1:
            raise ConfigError(f"strategy.min_token_prob={prob!r} for strategy {name!r}; allowed: a number from 0 to 1 "
                              f"(nodes whose path probability is lower are not drafted)")
        if not _is_int(cached) or cached < 0:
            raise ConfigError(f"strategy.max_cached_requests={cached!r} for strategy {name!r}; allowed: an integer "
                              f">= 0 (earlier outputs in the global suffix trie; 0 = none)")

    @classmethod
    def raise_if_bad_tree(cls, name: str, tree: Any, top_k: Any, num_nodes: Any = 0, k: int = 1,
                          tree_choices: Any = None) -> None:
        """tree=chain or dynamic (the speculation tree; trees.check_tree allows dynamic only for chain drafters)."""
        if tree not in TREES:
            raise ConfigError(f"strategy.tree={tree!r} for strategy {name!r}; allowed: chain (the likeliest path, k "
                              f"tokens) or dynamic (the speculation tree, num_nodes nodes at most k deep)")
        if not _is_int(top_k) or top_k < 1:
            raise ConfigError(f"strategy.top_k={top_k!r} for strategy {name!r}; allowed: an integer >= 1 "
                              f"(tree=dynamic: the most children per node)")
        if tree == "dynamic" and (not _is_int(num_nodes) or not 1 <= num_nodes <= 1024):
            raise ConfigError(f"strategy.num_nodes={num_nodes!r} for strategy {name!r} with tree=dynamic; allowed: an "
                              f"integer from 1 to 1024 (the nodes every step verifies per row)")
        if tree_choices is not None:
            raise ConfigError(f"strategy.tree_choices is set for strategy {name!r}; allowed: null (suffix grows its "
                              f"tree from counts, tree=dynamic)")

    # -- the batch -------------------------------------------------------------------------------------------
    def begin(self, state: DecodeState) -> None:
        super().begin(state)
        b = state.batch_size
        self.seqs, self.prompt_lengths = [[] for _ in range(b)], [0] * b
        self.tries = [SuffixTrie(self.max_depth) for _ in range(b)]
        self.local, self.shared, self.running = [[] for _ in range(b)], [[] for _ in range(b)], [False] * b

    def admit(self, state: DecodeState, lo: int, hi: int, *prefill: Any) -> None:
        super().admit(state, lo, hi, *prefill)
        # continuous batching: a request that ended at its first token was not seen to finish (commit() was not
        # called): its output goes to the global trie before its row takes the next request
        self._finish([on and not lo <= b < hi for b, on in enumerate(self.running)])
        for b, row in zip(range(lo, hi), self.admitted_tokens(state, lo, hi)):  # prompts and the first token
            self.seqs[b] = row
            self.prompt_lengths[b] = state.prompt_lengths[b]
            trie, active = SuffixTrie(self.max_depth), []
            for token in self.seqs[b]:
                active = trie.extend(active, token)
            self.tries[b], self.local[b] = trie, active
            self.shared[b] = self.global_trie.suffix_nodes(self.seqs[b], self.max_match)
            self.running[b] = True
        # a row that ended at its first token gives it to the global trie
        self._finish(state.active.tolist() if state.active_host is None else list(state.active_host))

    def lookup(self, state: DecodeState) -> torch.Tensor | Draft:
        tree = self.tree == "dynamic"
        n = self.num_nodes if tree else self.k
        width = self.top_k if tree else 1
        tokens = np.empty((state.batch_size, n), dtype=np.int64)
        parents = np.full((state.batch_size, n), -1, dtype=np.int64)
        for b, seq in enumerate(self.seqs):
            drafted: tuple[list[int], list[int], list[float]] = ([], [], [])
            if self.running[b]:
                drafted = self.draft_row(b, n, width)
            if tree:
                tokens[b], parents[b] = pad_tree(drafted[0], drafted[1], n, seq[-1])
            else:
                tokens[b] = pad_chain(drafted[0], n, seq[-1])
        if not tree:
            return torch.from_numpy(tokens).to(self.device)
        both = torch.from_numpy(np.stack([tokens, parents])).to(self.device)  # one copy
        return Draft(tokens=both[0], parents=both[1])

    def draft_row(self, b: int, n: int, width: int) -> tuple[list[int], list[int], list[float]]:
        """Row b's best speculation (tokens, parents, path probabilities) of the per-request and the global trie."""
        best: tuple[list[int], list[int], list[float]] = ([], [], [])
        score = 0.0
        for trie, nodes in ((self.tries[b], self.local[b]), (self.global_trie, self.shared[b])):
            node, m = longest_match(trie, nodes, self.max_match)
            if m == 0:
                continue
            cap = min(n, int(self.max_spec_factor * m + 1e-6))
            drafted = speculate(trie, node, cap, self.k, self.min_token_prob, width)
            if sum(drafted[2]) > score:
                best, score = drafted, sum(drafted[2])
        return best

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        super().commit(state, verdict, accepted, old_lengths)
        # the step wrote at most K+1 tokens per row from its old length on: copy that window (and the active flags)
        cols = torch.tensor(old_lengths, device=self.device)[:, None] + torch.arange(self.k + 1, device=self.device)
        window = state.tokens.gather(1, cols.clamp(max=state.max_len - 1))
        host = torch.cat([window, state.active[:, None].long()], 1).cpu().tolist()  # the step's one copy to the host
        for b, (old, new) in enumerate(zip(old_lengths, state.lengths_host)):
            for token in host[b][: new - old]:
                self.seqs[b].append(token)
                self.local[b] = self.tries[b].extend(self.local[b], token)
                self.shared[b] = self.global_trie.advance(self.shared[b], token, self.max_match)
        self._finish([bool(row[-1]) for row in host])

    def _finish(self, active: list[bool]) -> None:
        """Rows that stopped generating give their output to the global trie (oldest requests evicted); the other
        rows' global matches are then found again (the trie changed under them)."""
        done = [b for b, (was, now) in enumerate(zip(self.running, active)) if was and not now]
        if not done:
            return
        for b in done:
            self.running[b] = False
            if self.max_cached_requests == 0:
                continue
            output = self.seqs[b][self.prompt_lengths[b] :]
            self.global_trie.insert(output)
            self.cached.append(output)
            while len(self.cached) > self.max_cached_requests:
                self.global_trie.remove(self.cached.popleft())
        for b, on in enumerate(self.running):
            if on:
                self.shared[b] = self.global_trie.suffix_nodes(self.seqs[b], self.max_match)
