"""Tree verification (verify.greedy_tree_verify, verify.tree_rejection_sample): chains reduce to the chain rules
bit for bit, T = 0 follows the target's greedy continuation through the tree, and T > 0 keeps the target's
distribution (chi-square), failing when the draft's q is ignored.

Small odd sizes: B = 5, N = 7 nodes, V = 11 (or 6 where counts must be dense).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specbench_testing import chisquare_pvalue, tree_resample_from_p
from specbench.strategies.trees import draw_order, draw_rows, sample_children
from specbench.verify import (greedy_tree_verify, greedy_verify, raise_if_not_topological, rejection_sample, sample_from,
                              tree_rejection_sample)


def _chain(bsz: int, k: int) -> torch.Tensor:
    return torch.arange(-1, k - 1).expand(bsz, k).clone()


def _random_tree(g: torch.Generator, bsz: int, n: int) -> torch.Tensor:
    """Random topological parents [B, N]: node i hangs under -1 or any j < i."""
    return torch.stack([torch.stack([torch.randint(-1, i, (1,), generator=g)[0] if i else torch.tensor(-1)
                                     for i in range(n)]) for _ in range(bsz)])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_q", [True, False])
def test_a_chain_gives_the_chain_verdict_bit_for_bit(seed, with_q):
    g = torch.Generator().manual_seed(seed)
    bsz, k, v = 5, 4, 11
    p = torch.softmax(torch.randn(bsz, k + 1, v, generator=g) * 2, -1)
    q = torch.softmax(torch.randn(bsz, k, v, generator=g) * 2, -1) if with_q else None
    # drafts near p so that some are accepted and some rejected
    tokens = sample_from(p[:, :k], torch.empty(bsz, k, v).exponential_(generator=g)) if seed % 2 else \
        torch.randint(0, v, (bsz, k), generator=g)
    u = torch.rand(bsz, k, dtype=torch.float64, generator=g)
    e = torch.empty(bsz, v).exponential_(generator=g)
    chain = rejection_sample(tokens, q, p, u, e)
    tree = tree_rejection_sample(tokens, _chain(bsz, k), q, p, u, e)
    assert torch.equal(tree.accepted, chain.accepted) and torch.equal(tree.next_token, chain.next_token)
    for b in range(bsz):
        assert tree.path[b].tolist() == list(range(int(chain.accepted[b]))) + [-1] * (k - int(chain.accepted[b]))
    logits = torch.randn(bsz, k + 1, v, generator=g)
    tokens = torch.where(torch.rand(bsz, k, generator=g) < 0.7, logits[:, :k].argmax(-1), tokens)
    gt, gc = greedy_tree_verify(tokens, _chain(bsz, k), logits), greedy_verify(tokens, logits)
    assert torch.equal(gt.accepted, gc.accepted) and torch.equal(gt.next_token, gc.next_token)


def _greedy_reference(tokens: list[int], parents: list[int], argmax: list[int]) -> tuple[list[int], int]:
    """Plain recursion: from the pending token, the first child equal to the target's argmax, again and again."""
    node, path = -1, []
    while True:
        nxt = next((i for i, (t, par) in enumerate(zip(tokens, parents)) if par == node and t == argmax[node + 1]), None)
        if nxt is None:
            return path, argmax[node + 1]
        path.append(nxt)
        node = nxt


@pytest.mark.parametrize("seed", range(10))
def test_greedy_tree_follows_the_target_greedy_continuation(seed):
    g = torch.Generator().manual_seed(seed)
    bsz, n, v = 5, 7, 3  # a 3-token vocabulary: many nodes match, so deep paths happen
    parents = _random_tree(g, bsz, n)
    tokens = torch.randint(0, v, (bsz, n), generator=g)
    logits = torch.randn(bsz, n + 1, v, generator=g)
    out = greedy_tree_verify(tokens, parents, logits)
    argmax = logits.argmax(-1)
    for b in range(bsz):
        path, nxt = _greedy_reference(tokens[b].tolist(), parents[b].tolist(), argmax[b].tolist())
        assert out.path[b, : len(path)].tolist() == path and int(out.accepted[b]) == len(path)
        assert (out.path[b, len(path):] == -1).all() and int(out.next_token[b]) == nxt


def test_greedy_tree_takes_the_second_branch_when_the_first_is_wrong():
    v = 5
    logits = torch.full((1, 5, v), -1.0)
    logits[0, 0, 3] = 1  # after the pending token the target wants 3
    logits[0, 2, 4] = 1  # after node 1 (token 3) it wants 4
    logits[0, 4, 0] = 1  # after node 3 (token 4) it wants 0: the bonus
    tokens = torch.tensor([[2, 3, 1, 4]])
    parents = torch.tensor([[-1, -1, 0, 1]])  # node 0 (2) and node 1 (3) under the root; 2 under 0; 3 under 1
    out = greedy_tree_verify(tokens, parents, logits)
    assert out.path[0].tolist() == [1, 3, -1, -1] and int(out.accepted[0]) == 2 and int(out.next_token[0]) == 0


def test_parents_must_be_topological():
    raise_if_not_topological(torch.tensor([[-1, 0, 0, 2]]))
    for bad in ([[-1, 1, 0]], [[0, -1]], [[-1, -2]]):
        with pytest.raises(ValueError, match="topological"):
            raise_if_not_topological(torch.tensor(bad))


# --- T > 0: the output follows p -----------------------------------------------------------------------------------

V = 6
ROWS = 40_000


def _two_level(g: torch.Generator, sampled: bool | str):
    """A target over two tokens: p1 after the pending token, p2[x] after first token x; a draft q1, q2[x]. Each row
    drafts a tree of 2 first-level children (independent draws from q1, or the two most likely under q1, one-hot, or
    with sampled="without-replacement" two draws without replacement as trees.sample_children makes them, each with
    the q it was drawn from) with 2 children each (the same from q2[parent]): 6 nodes in topological order.
    sampled="stop-goes-wider" is trees.expand_dynamic_sampled's confidence stop: the root's first two draws, the first
    one's two children, and then either the second one's two children or, in rows where a stop decided by what was
    drawn says so, the root's third and fourth draws (siblings of nodes 0 and 1 that come after node 0's children)."""
    p1 = torch.softmax(torch.randn(V, generator=g) * 1.5, -1)
    p2 = torch.softmax(torch.randn(V, V, generator=g) * 1.5, -1)
    q1 = torch.softmax(torch.randn(V, generator=g) * 1.5, -1)
    q2 = torch.softmax(torch.randn(V, V, generator=g) * 1.5, -1)
    parents = torch.tensor([-1, -1, 0, 0, 1, 1]).expand(ROWS, 6)
    if sampled == "without-replacement":
        first, q_first = sample_children(q1.expand(ROWS, V), 2, g)  # [B, 2], [B, 2, V]
        second, q_second = sample_children(q2[first], 2, g)  # [B, 2, 2], [B, 2, 2, V]
        tokens = torch.cat([first, second.reshape(ROWS, 4)], 1)
        target = torch.stack([p1.expand(ROWS, V)] + [p2[tokens[:, i]] for i in range(6)], 1)
        return p1, p2, tokens, parents, torch.cat([q_first, q_second.reshape(ROWS, 4, V)], 1), target
    if sampled == "stop-goes-wider":
        order = draw_order(q1.expand(ROWS, V), 4, g)  # the root's draws, in draw order
        q_order = draw_rows(q1.expand(ROWS, V), order)
        under = [sample_children(q2[order[:, i]], 2, g) for i in range(2)]  # each first-level node's two children
        wide = (order[:, :1] != q1.argmax()) | (under[0][0][:, :1] == 0)  # a stop decided by nodes drawn before it
        tokens = torch.cat([order[:, :2], under[0][0], torch.where(wide, order[:, 2:], under[1][0])], 1)
        parents = torch.cat([parents[:, :4], torch.where(wide, -1, parents[:, 4:])], 1)
        qs = torch.cat([q_order[:, :2], under[0][1], torch.where(wide[..., None], q_order[:, 2:], under[1][1])], 1)
        target = torch.stack([p1.expand(ROWS, V)] + [p2[tokens[:, i]] for i in range(6)], 1)
        assert 0.2 < float(wide.float().mean()) < 0.8
        return p1, p2, tokens, parents, qs, target
    if sampled:
        first = torch.multinomial(q1, 2 * ROWS, replacement=True, generator=g).view(ROWS, 2)
        second = torch.stack([torch.multinomial(q2[first[:, i]], 2, replacement=True, generator=g) for i in range(2)], 1)
    else:
        first = q1.topk(2).indices.expand(ROWS, 2)
        second = torch.stack([q2[first[:, i]].topk(2, dim=-1).indices for i in range(2)], 1)
    tokens = torch.cat([first, second.reshape(ROWS, 4)], 1)  # [B, 6]
    qs = torch.stack([q1.expand(ROWS, V), q1.expand(ROWS, V)] + [q2[first[:, i // 2]] for i in range(4)], 1)
    target = torch.stack([p1.expand(ROWS, V)] + [p2[tokens[:, i]] for i in range(6)], 1)  # [B, 7, V]
    return p1, p2, tokens, parents, (qs if sampled else None), target


def _emitted(tokens, out):
    """The first two tokens the step emits per row (the second only where the first came from the tree)."""
    rows = torch.arange(tokens.shape[0])
    first = torch.where(out.accepted >= 1, tokens[rows, out.path[:, 0].clamp(min=0)], out.next_token)
    second = torch.where(out.accepted >= 2, tokens[rows, out.path[:, 1].clamp(min=0)], out.next_token)
    return first, second, out.accepted >= 1


def _pvalues(p1, p2, first, second, has_second) -> list[float]:
    pv = [chisquare_pvalue(np.bincount(first.numpy(), minlength=V), p1.numpy())]
    for x in range(V):  # the second token given the first, where the first came from the tree
        sel = has_second & (first == x)
        if int(sel.sum()) >= 500:
            pv.append(chisquare_pvalue(np.bincount(second[sel].numpy(), minlength=V), p2[x].numpy()))
    return pv


@pytest.mark.parametrize("sampled", [True, "without-replacement", "stop-goes-wider", False],
                         ids=["iid-draws-with-q", "draws-without-replacement", "stop-goes-wider", "top2-one-hot"])
def test_tree_rejection_sampling_keeps_the_target_distribution(sampled):
    g = torch.Generator().manual_seed(3)
    p1, p2, tokens, parents, qs, target = _two_level(g, sampled)
    u = torch.rand(ROWS, 6, dtype=torch.float64, generator=g)
    e = torch.empty(ROWS, V).exponential_(generator=g)
    out = tree_rejection_sample(tokens, parents, qs, target, u, e)
    first, second, has_second = _emitted(tokens, out)
    assert 0.2 < float(has_second.float().mean()) < 0.95  # both acceptance and rejection happen
    assert (out.accepted == 2).any()
    pv = _pvalues(p1, p2, first, second, has_second)
    assert len(pv) >= 3 and min(pv) > 1e-4, pv


def test_the_tree_test_fails_under_a_wrong_rule():
    g = torch.Generator().manual_seed(3)
    p1, p2, tokens, parents, qs, target = _two_level(g, sampled=True)
    u = torch.rand(ROWS, 6, dtype=torch.float64, generator=g)
    e = torch.empty(ROWS, V).exponential_(generator=g)
    pv = _pvalues(p1, p2, *_emitted(tokens, tree_resample_from_p(tokens, parents, qs, target, u, e)))
    assert min(pv) < 1e-6, pv


def test_drafts_without_q_are_verified_as_one_hot_and_stay_lossless():
    """Independent draws verified as one-hot tokens (no q given): sampling p by elimination, lossless whatever the
    candidates are; only acceptance drops."""
    g = torch.Generator().manual_seed(4)
    p1, p2, tokens, parents, qs, target = _two_level(g, sampled=True)
    u = torch.rand(ROWS, 6, dtype=torch.float64, generator=g)
    e = torch.empty(ROWS, V).exponential_(generator=g)
    with_q = tree_rejection_sample(tokens, parents, qs, target, u, e)
    one_hot = tree_rejection_sample(tokens, parents, None, target, u, e)
    assert min(_pvalues(p1, p2, *_emitted(tokens, one_hot))) > 1e-4
    assert float(one_hot.accepted.float().mean()) < float(with_q.accepted.float().mean())


def test_tree_layout_equals_the_node_by_node_reference():
    """Pointer jumping gives the same depths and ancestor masks as walking the nodes one by one: chains (deepest
    case), top-k combs and random topological trees of odd sizes, rows of one batch differing."""
    from specbench.verify import tree_layout

    g = torch.Generator().manual_seed(0)
    cases = [torch.arange(-1, 16)[None].expand(3, -1), torch.tensor([[-1, -1, 0, 0, 2, 2, 4]])]
    for n in (1, 5, 17, 33):
        cases.append(torch.stack([torch.tensor([int(torch.randint(-1, i, (1,), generator=g)) for i in range(n)])
                                  for _ in range(3)]))
    for parents in cases:
        depth, mask = tree_layout(parents)
        want_depth, want_mask = _tree_layout_loop(parents)
        assert torch.equal(depth, want_depth) and torch.equal(mask, want_mask), parents


def _tree_layout_loop(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tree_layout's reference: one node at a time, each row its parent's row plus itself (tests compare them)."""
    bsz, n = parents.shape
    dev = parents.device
    depth = torch.zeros((bsz, n + 1), dtype=torch.long, device=dev)
    mask = torch.zeros((bsz, n + 1, n + 1), dtype=torch.bool, device=dev)
    mask[:, 0, 0] = True
    rows = torch.arange(bsz, device=dev)
    for i in range(n):
        up = parents[:, i] + 1
        depth[:, i + 1] = depth[rows, up] + 1
        mask[:, i + 1] = mask[rows, up]
        mask[:, i + 1, i + 1] = True
    return depth, mask


def test_sample_children_draws_without_replacement_and_returns_each_draws_q():
    """trees.sample_children: distinct tokens in draw order; row j is q without the earlier draws, renormalised (one-hot
    where q is exhausted); the first draw follows q and the second q without the first (chi-square)."""
    g = torch.Generator().manual_seed(5)
    q = torch.softmax(torch.randn(3, V, generator=g) * 1.5, -1)
    q[2] = 0.0
    q[2, 4] = 1.0  # one token only: the second draw has nothing left
    tokens, rows = sample_children(q, 2, g)
    assert tokens.shape == (3, 2) and rows.shape == (3, 2, V)
    assert (tokens[:, 0] != tokens[:, 1]).all()
    torch.testing.assert_close(rows.sum(-1), torch.ones(3, 2))
    for b in range(2):
        torch.testing.assert_close(rows[b, 0], q[b])
        rest = q[b].clone()
        rest[tokens[b, 0]] = 0
        torch.testing.assert_close(rows[b, 1], rest / rest.sum())
    assert rows[2, 1, tokens[2, 1]] == 1.0 and tokens[2, 0] == 4
    many = torch.softmax(torch.randn(V, generator=g), -1).expand(ROWS, V)
    drawn, _ = sample_children(many, 2, g)
    assert chisquare_pvalue(np.bincount(drawn[:, 0].numpy(), minlength=V), many[0].numpy()) > 1e-4
    x0 = int(many[0].argmax())
    second = drawn[drawn[:, 0] == x0, 1]
    rest = many[0].clone()
    rest[x0] = 0
    assert chisquare_pvalue(np.bincount(second.numpy(), minlength=V), (rest / rest.sum()).numpy()) > 1e-4
