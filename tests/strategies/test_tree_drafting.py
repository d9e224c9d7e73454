"""Tree drafting end to end (engine + base + decoder, CPU fp32): draft_model with `tree=topk` verifies the top-1
chain and its runners-up in one target forward, accepts a path through them, moves the path's cache entries into
place and stays lossless: T = 0 output equals transformers' greedy decoding at batch 1 and a ragged batch 4."""

from __future__ import annotations

import pytest
import torch

from specbench_testing import hf_greedy, perturbed, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.draft_model import DraftModelProposer
from specbench.strategies.medusa import MedusaProposer
from specbench.strategies.ngram import NgramProposer
from specbench.strategies.none import TargetOnly
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")
V = 101


@pytest.fixture(scope="module")
def pair():
    target = tiny("tiny-llama")
    return target, perturbed(target, 0.5)


def _run(target, draft, sp: SamplingParams, bsz: int, max_new: int = 12, **settings):
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=sp, device=CPU)
    proposer = DraftModelProposer(ctx, k=3, **settings)
    engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=max_new, eos_ids=set(), device=CPU)
    prompts = ragged_prompts(V)[:4]
    rows = []
    for s in range(0, len(prompts), bsz):
        rows += engine.generate(prompts[s : s + bsz])[0]
    return prompts, rows


@pytest.mark.parametrize("bsz", [1, 4])
def test_a_topk_tree_is_lossless_at_t0_and_accepts_more_than_the_chain(pair, bsz):
    target, draft = pair
    prompts, tree = _run(target, draft, SamplingParams(), bsz, tree="topk", top_k=3)
    _, chain = _run(target, draft, SamplingParams(), bsz)
    want = hf_greedy(target.model, prompts, 12)
    assert [r.output_ids for r in tree] == want == [r.output_ids for r in chain]
    al = lambda rows: 1 + sum(r.accepted_tokens for r in rows) / sum(r.drafts for r in rows)  # noqa: E731
    assert al(tree) > al(chain), (al(tree), al(chain))
    assert all(r.draft_tokens == 9 * r.drafts for r in tree)  # 3 depths x (chain node + 2 runners-up) verified


def test_a_self_draft_tree_accepts_its_whole_chain_at_t1(pair):
    target, _ = pair
    _, rows = _run(target, target, SamplingParams(temperature=1.0, seed=3), 4, max_new=13, tree="topk", top_k=2)
    assert all(r.accepted_tokens == 3 * r.drafts for r in rows)


def test_tree_settings_are_checked():
    with pytest.raises(ConfigError, match="strategy.tree='bush'"):
        DraftModelProposer.raise_if_bad_tree("draft_model", "bush", 2)
    with pytest.raises(ConfigError, match="strategy.top_k=0"):
        DraftModelProposer.raise_if_bad_tree("draft_model", "topk", 0)
    NgramProposer.raise_if_bad_tree("ngram", "topk", 2)  # a lookup drafts its own tree (ngram: several matches)
    with pytest.raises(ConfigError, match="tree=dynamic for strategy 'ngram'"):
        NgramProposer.raise_if_bad_tree("ngram", "dynamic", 2, 4, 3)
    TargetOnly.validate({"name": "none", "k": 0, "tree": "topk", "top_k": 3})  # ignored, like k: it drafts nothing
    with pytest.raises(ConfigError, match="tree=dynamic for strategy 'none'"):  # refused before any model loads
        TargetOnly.validate({"name": "none", "k": 0, "tree": "dynamic", "top_k": 2, "num_nodes": 3})
    MedusaProposer.raise_if_bad_tree("medusa", "topk", 2)
    with pytest.raises(ConfigError, match=r"strategy.num_nodes=0 .* from 1 to 10"):
        DraftModelProposer.raise_if_bad_tree("draft_model", "dynamic", 2, 0, 3)
    with pytest.raises(ConfigError, match="tree=dynamic for strategy 'medusa'"):
        MedusaProposer.raise_if_bad_tree("medusa", "dynamic", 2, 4, 3)


# --- EAGLE-2's dynamic tree -----------------------------------------------------------------------------------


def _reference_dynamic_tree(draft_model, prompt: list[int], k: int, w: int, num_nodes: int):
    """EAGLE-2's expansion and rerank written plainly: every node's distribution from transformers' forward over
    prompt + its path (no cache, no tree mask). Returns (tokens, parents) in the order the nodes were made, kept
    ones only, and the smallest score gap met in a ranking (a near-tie would make fp32 noise decide)."""

    def logp(path: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(draft_model(torch.tensor([prompt + path]), use_cache=False).logits[0, -1].double(), -1)

    nodes = []  # (score, token, parent index, path)
    gaps = []
    top = logp([]).topk(w + 1)
    gaps.append(float(top.values[w - 1] - top.values[w]))
    front = []
    for s, t in zip(top.values[:w].tolist(), top.indices[:w].tolist()):
        front.append(len(nodes))
        nodes.append((s, t, -1, [t]))
    for _ in range(1, k):
        children = []
        for f in front:
            s0, _, _, path = nodes[f]
            c = (s0 + logp(path)).topk(w + 1)
            gaps.append(float(c.values[w - 1] - c.values[w]))
            children += [(s, t, f, path + [t]) for s, t in zip(c.values[:w].tolist(), c.indices[:w].tolist())]
        made = len(nodes)
        nodes += children
        order = sorted(range(len(children)), key=lambda i: -children[i][0])
        gaps.append(children[order[w - 1]][0] - children[order[w]][0] if len(order) > w else float("inf"))
        front = [made + i for i in order[:w]]
    ranked = sorted(range(len(nodes)), key=lambda i: (-nodes[i][0], i))
    if len(ranked) > num_nodes:
        gaps.append(nodes[ranked[num_nodes - 1]][0] - nodes[ranked[num_nodes]][0])
    keep = sorted(ranked[:num_nodes])
    index = {old: new for new, old in enumerate(keep)}
    return [nodes[i][1] for i in keep], [index.get(nodes[i][2], -1) for i in keep], min(gaps)


@pytest.mark.parametrize("bsz, num_nodes", [(1, 8), (3, 8), (3, 21)])
def test_the_dynamic_tree_is_eagle2s_expansion_and_rerank(pair, bsz, num_nodes):
    """The base's dynamic tree (frontier forwards with tree masks over the draft's scratch slots) drafts the same
    tree as the plain expansion with full recompute, row by row at a ragged batch; 21 nodes keep every node made
    (k = 3, top_k = 3), so every depth-3 node's distribution is checked too."""
    target, draft = pair
    sp = SamplingParams()
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=sp, device=CPU)
    proposer = DraftModelProposer(ctx, k=3, tree="dynamic", top_k=3, num_nodes=num_nodes)
    trees = []
    original = proposer._draft_dynamic

    def spy(state, out):
        d = original(state, out)
        trees.append((state.tokens.clone(), list(state.lengths_host), d.tokens.clone(), d.parents.clone()))
        return d

    proposer._draft_dynamic = spy
    engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=6, eos_ids=set(), device=CPU)
    prompts = ragged_prompts(V)[:bsz]
    engine.generate(prompts)
    checked = 0
    for tokens, lengths, d_tokens, d_parents in trees[:3]:
        for b, n in enumerate(lengths):
            want_tokens, want_parents, gap = _reference_dynamic_tree(draft.model, tokens[b, :n].tolist(), 3, 3, num_nodes)
            if gap < 1e-6:  # a near-tie: either order is right
                continue
            assert d_tokens[b].tolist() == want_tokens and d_parents[b].tolist() == want_parents, (b, n)
            checked += 1
    assert checked >= 2 * bsz


@pytest.mark.parametrize("bsz", [1, 4])
def test_a_dynamic_tree_is_lossless_at_t0_and_accepts_more_than_the_chain(pair, bsz):
    target, draft = pair
    prompts, tree = _run(target, draft, SamplingParams(), bsz, tree="dynamic", top_k=3, num_nodes=8)
    _, chain = _run(target, draft, SamplingParams(), bsz)
    assert [r.output_ids for r in tree] == hf_greedy(target.model, prompts, 12) == [r.output_ids for r in chain]
    al = lambda rows: 1 + sum(r.accepted_tokens for r in rows) / sum(r.drafts for r in rows)  # noqa: E731
    assert al(tree) > al(chain), (al(tree), al(chain))
    assert all(r.draft_tokens == 8 * r.drafts for r in tree)


def test_a_one_wide_dynamic_tree_is_the_chain(pair):
    """top_k = 1: the expansion is the greedy chain, drafted through the tree path (scratch slots, ancestor masks);
    a self-draft accepts all of it."""
    target, _ = pair
    _, rows = _run(target, target, SamplingParams(), 4, max_new=13, tree="dynamic", top_k=1, num_nodes=3)
    assert all(r.accepted_tokens == 3 * r.drafts for r in rows)
