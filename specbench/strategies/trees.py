"""Tree drafting for the proposer base: which trees a strategy may draft, their shapes, and the expansions.

`strategy.tree` picks the shape of a step's draft (the engine verifies any tree in one target forward):

| tree | nodes per step | what it drafts |
| --- | --- | --- |
| chain | k | the top-1 (or, at T > 0, sampled) token at each depth |
| topk | k * top_k | the chain, plus its top_k - 1 runners-up at every depth as leaves (a lookup strategy: up to top_k looked-up continuations as branches) |
| static | len(tree_choices) | a fixed tree (EAGLE-1's; Medusa's sparse tree): node (r1, ..., rd) is the rank-rd token after node (r1, ..., rd-1) |
| dynamic | num_nodes | EAGLE-2 (arXiv 2406.16858): per depth, expand the top_k nodes of highest cumulative draft log-probability into their top_k children; keep the num_nodes likeliest of all nodes made (at T > 0, a sampling drafter draws the children instead: below) |
| auto | num_nodes or k | dynamic where the target verifies a tree for about the cost of its products; chain where each verified token's attention is a call of its own, so every node costs a verify what a token of a chain does (the CPU's bit-invariant bf16 path: `verify_attends_per_token` of the target's runner). Resolved once, when the strategy is built (`resolve_auto`); results.json's run.tree says which |

Static and dynamic trees of a chain drafter (draft_model, eagle, layer_skip) feed each depth's frontier in one draft
forward: the frontier goes to scratch slots past each row's tokens (L, L+1, ...), every node seeing its own
ancestors (`tree_path`, the slots of its ancestors from the pending token down), and the next catch-up overwrites
them. A parallel drafter (Medusa) drafts a static tree from its heads alone: node (r1, ..., rd) is head d's
rank-rd token, whatever its parent. Every node of a static tree, and of a dynamic tree at T = 0, is a deterministic
pick, so the verifier treats the tree as one-hot drafts: lossless at any temperature.

At T > 0 a sampling drafter's dynamic tree is drawn instead (`expand_dynamic_sampled`): each expanded node's
children are draws from its q without replacement, each returned with the distribution it was drawn from (q with the
earlier siblings removed, renormalised), and the verifier's recursive rule accepts them as a sampled chain's drafts
are accepted (min(1, p/q)), not one-hot. The tree's shape may not depend on what was drawn below an expanded node, so
nothing is pruned afterwards: the node budget is spent choosing which nodes to expand, best cumulative draft
probability first, and every child of an expanded node is kept (the last one expanded may get fewer, by count). A
confidence stop spends what is left on more of the pending token's draws.

The functions here work on tensors and a `feed` callable (the base's draft forward); they know nothing of the
engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from specbench.errors import ConfigError
from specbench.verify import exp_noise

TREES = ("chain", "topk", "static", "dynamic", "auto")  # strategy.tree

# feed(tokens [B, T], positions [B, T], hidden [B, T, H] | None, attn_len, slots [B, T], tree_path [B, T, E])
#   -> the base's DraftOutput: .logits [B, T, V'] over its columns (a reduced draft vocabulary's own, EAGLE-3's d2t,
#   or the target's ids), .hidden [B, T, H] | None, .ids(columns) -> target ids, .on_target_ids(x, fill) -> [..., V].
#   The trees rank and draw over the columns and map what they return: tokens to target ids, q to [..., V]
Feed = Callable[..., Any]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def resolve_auto(tree: str, target_runner: Any) -> str:
    """strategy.tree=auto as this target verifies: "chain" where its runner attends per verified token (each node
    of a tree would cost a verify what a token of a chain does), "dynamic" elsewhere; any other value as it is."""
    if tree != "auto":
        return tree
    return "chain" if getattr(target_runner, "verify_attends_per_token", False) else "dynamic"


def dynamic_tree_size(k: int, top_k: int) -> int:
    """Nodes a dynamic tree's expansion makes: top_k at depth 1, then top_k^2 children per further depth."""
    return top_k + (k - 1) * top_k * top_k


def default_static_choices(k: int) -> tuple[tuple[int, ...], ...]:
    """A small static tree of depth k: the top-1 chain, a runner-up branch off every chain node, the runner-up's
    own top-1 chain at depth 1, and the third candidate at depth 1 (3k nodes for k >= 2)."""
    paths = {(2,)}
    for d in range(1, k + 1):
        paths |= {(0,) * d, (0,) * (d - 1) + (1,), (1,) + (0,) * (d - 1)}
    return tuple(sorted(paths, key=lambda p: (len(p), p)))


@dataclass(frozen=True)
class StaticTree:
    """A static tree in topological order (by depth, then rank path): node i's parent, its rank among its
    parent's candidates, its depth (1 = under the pending token), and per depth d < max the nodes with children."""

    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    depths: tuple[int, ...]
    fed: tuple[tuple[int, ...], ...]  # fed[d - 1]: nodes at depth d that have children, in order

    @property
    def depth(self) -> int:
        return max(self.depths)

    @property
    def width(self) -> int:
        return max(self.ranks) + 1


@lru_cache(maxsize=32)
def static_tree(choices: tuple[tuple[int, ...], ...]) -> StaticTree:
    paths = sorted(choices, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(paths)}
    parents = tuple(index[p[:-1]] if len(p) > 1 else -1 for p in paths)
    has_children = {parents[i] for i in range(len(paths))}
    depth = max(len(p) for p in paths)
    fed = tuple(tuple(i for i, p in enumerate(paths) if len(p) == d and i in has_children) for d in range(1, depth))
    return StaticTree(parents=parents, ranks=tuple(p[-1] for p in paths), depths=tuple(len(p) for p in paths), fed=fed)


def resolve_choices(tree_choices: Any, k: int) -> tuple[tuple[int, ...], ...]:
    return default_static_choices(k) if tree_choices is None else tuple(tuple(p) for p in tree_choices)


def check_tree(name: str, drafting: str, tree: Any, top_k: Any, num_nodes: Any, tree_choices: Any, k: int) -> None:
    """strategy.tree and its settings for a strategy that drafts by `drafting` (chain, parallel, lookup): a
    ConfigError naming what was given and what is allowed."""
    if tree not in TREES:
        raise ConfigError(f"strategy.tree={tree!r} for strategy {name!r}; allowed: {', '.join(TREES)}")
    if not _is_int(top_k) or top_k < 1:
        raise ConfigError(f"strategy.top_k={top_k!r} for strategy {name!r}; allowed: an integer >= 1")
    if tree == "static" and drafting == "lookup":
        raise ConfigError(f"strategy.tree=static for strategy {name!r}; allowed for strategies that draft with a "
                          f"forward (draft_model, eagle, medusa, layer_skip); a lookup strategy drafts branches with "
                          f"tree=topk")
    if tree in ("dynamic", "auto"):  # auto may resolve to dynamic: its settings must fit one
        if drafting != "chain":
            raise ConfigError(f"strategy.tree={tree} for strategy {name!r}; allowed for strategies that draft "
                              f"one depth per forward (draft_model, eagle, layer_skip)")
        most = dynamic_tree_size(k, top_k)
        if not _is_int(num_nodes) or not 1 <= num_nodes <= most:
            raise ConfigError(f"strategy.num_nodes={num_nodes!r} for strategy {name!r} with tree={tree}, k={k}, "
                              f"top_k={top_k}; allowed: an integer from 1 to {most} (the nodes the expansion makes: "
                              f"top_k + (k - 1) * top_k^2)")
    if tree_choices is not None and tree != "static":
        raise ConfigError(f"strategy.tree_choices is set for strategy {name!r} with tree={tree}; allowed only with "
                          f"tree=static")
    if tree == "static":
        _check_choices(name, tree_choices, k)


def _check_choices(name: str, tree_choices: Any, k: int) -> None:
    allowed = ("allowed: null (a default tree of depth k) or a list of rank paths such as [[0], [1], [0, 0], [0, 1]]: "
               "node [r1, ..., rd] is the rank-rd candidate after node [r1, ..., rd-1]; every path's prefixes are "
               "paths too; depth = k")
    if tree_choices is None:
        return
    ok = isinstance(tree_choices, Sequence) and not isinstance(tree_choices, str) and len(tree_choices) > 0 and all(
        isinstance(p, Sequence) and not isinstance(p, str) and len(p) > 0 and all(_is_int(r) and r >= 0 for r in p)
        for p in tree_choices)
    if not ok:
        raise ConfigError(f"strategy.tree_choices={tree_choices!r} for strategy {name!r}; {allowed}")
    paths = [tuple(p) for p in tree_choices]
    if len(set(paths)) != len(paths):
        raise ConfigError(f"strategy.tree_choices for strategy {name!r} repeats a path; {allowed}")
    missing = sorted({p[:i] for p in paths for i in range(1, len(p))} - set(paths))
    if missing:
        raise ConfigError(f"strategy.tree_choices for strategy {name!r} lacks the prefixes {[list(p) for p in missing]}; "
                          f"{allowed}")
    depth = max(len(p) for p in paths)
    if depth != k:
        raise ConfigError(f"strategy.tree_choices for strategy {name!r} is {depth} deep but strategy.k={k}; {allowed}")


@lru_cache(maxsize=64)
def topk_parents(k: int, top_k: int, device: torch.device) -> torch.Tensor:
    """[1, K * top_k] parents of a top-k tree in depth order: at depth i the chain node (index i * top_k) then its
    top_k - 1 runners-up, all under the chain node of depth i - 1 (the pending token at depth 0)."""
    return torch.tensor([[-1 if i < top_k else (i // top_k - 1) * top_k for i in range(k * top_k)]], device=device)


def _frontier_forward(feed: Feed, tok: torch.Tensor, depth: int, hidden: torch.Tensor | None, path: torch.Tensor,
                      lengths: torch.Tensor, offset: int, attn_len: int) -> tuple[Any, torch.Tensor]:
    """Feed frontier tokens [B, W] at depth `depth` (position L-1+depth) into scratch slots L+offset.., each under
    its ancestors' slots path [B, W, depth]; returns the forward and the frontier's own paths [B, W, depth+1]."""
    bsz, w = tok.shape
    slots = lengths + offset + torch.arange(w, device=tok.device)  # [B, W]
    path = torch.cat([path, slots[..., None]], -1).contiguous()
    out = feed(tok, (lengths - 1 + depth).expand(bsz, w), hidden, attn_len, slots=slots, tree_path=path)
    return out, path


def expand_dynamic(feed: Feed, root: Any, lengths: torch.Tensor, lengths_host: list[int], k: int, w: int,
                   num_nodes: int, stop: Callable[[torch.Tensor, int], bool] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-2's dynamic tree from the catch-up forward `root` (logits [B, 1+, V] at the pending token; hidden for
    hidden-state drafters). Returns (tokens, parents) [B, num_nodes], topological.

    `stop(score, depth)` (adaptive K): asked before each deeper expansion once the tree holds >= num_nodes nodes, with
    the frontier's cumulative log path probabilities score [B, w] and the depth made so far; True ends the expansion
    there (the rerank then keeps num_nodes of the nodes made, so the verify shape does not change)."""
    bsz, dev = lengths.shape[0], lengths.device
    attn_len = max(lengths_host) + (k - 1) * w
    score, col = torch.log_softmax(root.logits[:, -1].float(), -1).topk(w, -1)  # [B, w] depth 1
    tok = root.ids(col)  # target ids
    scores, toks, parents = [score], [tok], [torch.full_like(tok, -1)]
    front = torch.arange(w, device=dev).expand(bsz, w)  # the frontier's node ids
    path = (lengths - 1)[..., None].expand(bsz, w, 1)  # [B, w, 1]: the pending token's slot
    hidden = None if root.hidden is None else root.hidden[:, -1:].expand(-1, w, -1)
    made = w
    for depth in range(1, k):
        if stop is not None and made >= num_nodes and stop(score, depth):
            break
        out, path = _frontier_forward(feed, tok, depth, hidden, path, lengths, (depth - 1) * w, attn_len)
        child_score, child_col = (score[..., None] + torch.log_softmax(out.logits.float(), -1)).topk(w, -1)
        scores.append(child_score.flatten(1))  # [B, w * w], frontier-major
        toks.append(out.ids(child_col).flatten(1))
        parents.append(front[..., None].expand(-1, -1, w).flatten(1))
        best = scores[-1].topk(w, -1).indices  # [B, w] the next frontier among the children
        src = best // w  # the frontier column each one hangs under
        score, tok, front = scores[-1].gather(1, best), toks[-1].gather(1, best), made + best
        path = path.gather(1, src[..., None].expand(-1, -1, depth + 1))
        if out.hidden is not None:
            hidden = out.hidden.gather(1, src[..., None].expand(-1, -1, out.hidden.shape[-1]))
        made += w * w
    # rerank. A child scores at most its parent and is made after it, so a stable sort keeps each kept node's
    # parent; kept in the order made, the tree stays topological
    all_scores, all_toks, all_parents = torch.cat(scores, 1), torch.cat(toks, 1), torch.cat(parents, 1)
    keep = torch.sort(-all_scores, dim=1, stable=True).indices[:, :num_nodes].sort(dim=1).values
    index = torch.full_like(all_parents, -1).scatter_(1, keep, torch.arange(num_nodes, device=dev).expand(bsz, -1))
    old = all_parents.gather(1, keep)
    return all_toks.gather(1, keep), torch.where(old >= 0, index.gather(1, old.clamp(min=0)), -1)


def draw_order(q: torch.Tensor, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """n draws without replacement from q [..., V], in draw order (Gumbel-top-n: each is drawn from what the earlier
    left); a token with q = 0 comes only once q is exhausted."""
    gumbel = -exp_noise(q.shape, generator, q.device).log()
    return (q.log() + gumbel).topk(n, dim=-1).indices


def draw_rows(q: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The distribution each of draw_order's tokens [..., w] was drawn from [..., w, V]: q with the earlier draws
    removed, renormalised. Where nothing is left, one-hot at the token: the verifier then accepts it with probability
    r(x) and removes it, which keeps the rule lossless."""
    rows, left = [], q
    for j in range(tokens.shape[-1]):
        x = tokens[..., j : j + 1]
        mass = left.sum(-1, keepdim=True)
        drawn = (left.gather(-1, x) > 0) & (mass > 0)
        one_hot = torch.zeros_like(q).scatter_(-1, x, 1.0)
        rows.append(torch.where(drawn, left / mass.clamp_min(torch.finfo(q.dtype).tiny), one_hot))
        left = left.scatter(-1, x, 0.0)
    return torch.stack(rows, -2)


def sample_children(q: torch.Tensor, w: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """w draws without replacement from q [..., V] (draw_order) and the distribution each was drawn from (draw_rows)."""
    tokens = draw_order(q, w, generator)
    return tokens, draw_rows(q, tokens)


def expand_dynamic_sampled(feed: Feed, root: Any, lengths: torch.Tensor, lengths_host: list[int], k: int, w: int,
                           num_nodes: int, to_probs: Callable[[torch.Tensor], torch.Tensor],
                           generator: torch.Generator | None, stop: Callable[[torch.Tensor, int], bool] | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """A dynamic tree drawn at T > 0 (module docstring) from the catch-up forward `root`; `to_probs` turns draft
    logits [..., V] into q at the sampling settings. Returns (tokens, parents, probs) [B, N], [B, N], [B, N, V]
    with N = num_nodes (at most k deep), topological, each node's siblings in draw order, and the depth the
    expansion reached (where the budget ran out, or a stop).

    `stop(score, depth)` (adaptive K) is asked before each deeper expansion with the frontier's cumulative log draft
    probabilities [B, F]; True spends the nodes left on further draws from the pending token's q instead (wider, not
    deeper: the verify shape does not change). The choice looks only at nodes already drawn, so it keeps the rule
    lossless."""
    bsz, dev = lengths.shape[0], lengths.device
    attn_len = max(lengths_host) + (k - 1) * w
    q0 = to_probs(root.logits[:, -1].float())  # [B, V'] over the root's columns
    first = min(w, num_nodes)
    order = draw_order(q0, num_nodes, generator)  # [B, num_nodes] columns: the root's children and any drawn on a stop
    tok = root.ids(order[:, :first])  # target ids
    score = q0.gather(1, order[:, :first]).log()  # cumulative log draft probability of each frontier node
    toks, probs = [tok], [root.on_target_ids(draw_rows(q0, order[:, :first]), 0.0)]
    parents = [torch.full_like(tok, -1)]
    ids = torch.arange(first, device=dev).expand(bsz, first)  # the frontier's node ids
    path = (lengths - 1)[..., None].expand(bsz, first, 1)  # [B, F, d]: each frontier node's ancestors' slots
    hidden = None if root.hidden is None else root.hidden[:, -1:].expand(-1, first, -1)  # its parent's output
    made, depth = first, 1
    while made < num_nodes and depth < k:
        if stop is not None and stop(score, depth):
            wide = order[:, first : first + num_nodes - made]  # drawn after the root's first children
            toks.append(root.ids(wide))
            probs.append(root.on_target_ids(draw_rows(q0.scatter(1, order[:, :first], 0.0), wide), 0.0))
            parents.append(torch.full_like(wide, -1))
            made = num_nodes
            break
        left = num_nodes - made
        e = min(tok.shape[1], w, -(-left // w))  # nodes to expand (at most w: each depth's w scratch slots)
        best = score.topk(e, dim=-1).indices  # [B, e]; a choice by the expanded nodes' own draws only
        take = lambda t: t.gather(1, best[..., None].expand(-1, -1, t.shape[-1]))  # noqa: E731
        out, fed_path = _frontier_forward(feed, tok.gather(1, best), depth, None if hidden is None else take(hidden),
                                          take(path), lengths, (depth - 1) * w, attn_len)
        q = to_probs(out.logits.float())  # [B, e, V'] over out's columns
        child, rows = sample_children(q, w, generator)  # [B, e, w] columns, [B, e, w, V']
        n = min(e * w, left)  # the last expanded node keeps a prefix of its draws, by count
        tok = out.ids(child).flatten(1)[:, :n]  # target ids
        score = (score.gather(1, best)[..., None] + q.gather(2, child).log()).flatten(1)[:, :n]
        toks.append(tok)
        probs.append(out.on_target_ids(rows, 0.0).flatten(1, 2)[:, :n])
        parents.append(ids.gather(1, best)[..., None].expand(-1, -1, w).flatten(1)[:, :n])
        ids = made + torch.arange(n, device=dev).expand(bsz, n)
        path = fed_path.repeat_interleave(w, dim=1)[:, :n]  # a child's ancestors: its parent's path and slot
        hidden = None if out.hidden is None else out.hidden.repeat_interleave(w, dim=1)[:, :n]
        made, depth = made + n, depth + 1
    return torch.cat(toks, 1), torch.cat(parents, 1), torch.cat(probs, 1), depth


def expand_static(feed: Feed, root: Any, lengths: torch.Tensor, lengths_host: list[int],
                  tree: StaticTree) -> torch.Tensor:
    """A static tree from the catch-up forward `root`, one draft forward per depth over the nodes that have
    children. Returns tokens [B, N] in the tree's order."""
    bsz, dev, n = lengths.shape[0], lengths.device, len(tree.parents)
    attn_len = max(lengths_host) + sum(len(f) for f in tree.fed)
    tokens = torch.zeros((bsz, n), dtype=torch.long, device=dev)
    ranked = root.ids(root.logits[:, -1].topk(tree.width, -1).indices)  # [B, width] the pending token's candidates
    col = {}  # node -> its column in the forward that fed it
    paths: dict[int, torch.Tensor] = {}  # node -> [B, depth + 1] slots of its ancestors and itself
    outs: dict[int, Any] = {}  # node -> the forward that fed it
    offset = 0
    for d in range(1, tree.depth + 1):
        for i in (i for i in range(n) if tree.depths[i] == d):  # this depth's tokens from their parents' candidates
            p = tree.parents[i]
            cand = ranked if p < 0 else outs[p].ids(outs[p].logits[:, col[p]].topk(tree.width, -1).indices)
            tokens[:, i] = cand[:, tree.ranks[i]]
        if d == tree.depth:
            break
        fed = list(tree.fed[d - 1])
        up = [tree.parents[i] for i in fed]
        path = torch.stack([(lengths[:, 0] - 1)[:, None] if p < 0 else paths[p] for p in up], 1)  # [B, F, d]
        hidden = None
        if root.hidden is not None:
            hidden = torch.stack([root.hidden[:, -1] if p < 0 else outs[p].hidden[:, col[p]] for p in up], 1)
        out, path = _frontier_forward(feed, tokens[:, fed], d, hidden, path, lengths, offset, attn_len)
        offset += len(fed)
        for j, i in enumerate(fed):
            col[i], paths[i], outs[i] = j, path[:, j], out
    return tokens


def parallel_static(logits: torch.Tensor, tree: StaticTree) -> torch.Tensor:
    """Medusa's sparse tree from K heads' logits [B, K, V]: node (r1, ..., rd) is head d's rank-rd token."""
    ranked = logits.topk(tree.width, -1).indices  # [B, K, width]
    depth = torch.tensor(tree.depths, device=logits.device) - 1
    rank = torch.tensor(tree.ranks, device=logits.device)
    return ranked[:, depth, rank]  # [B, N]
