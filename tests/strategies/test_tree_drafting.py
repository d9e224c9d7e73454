"""Tree drafting end to end (engine + base + decoder, CPU fp32): draft_model with `tree=topk` verifies the top-1
chain and its runners-up in one target forward, accepts a path through them, moves the path's cache entries into
place and stays lossless: T = 0 output equals transformers' greedy decoding at batch 1 and a ragged batch 4."""

from __future__ import annotations

import pytest
import torch

from specbench_testing import hf_greedy, perturbed, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import RunnerWrapper, TransformersRunner, make_runner
from specbench.strategies import trees
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


def _run(target, draft, sp: SamplingParams, bsz: int, max_new: int = 12, backend: str = "auto", k: int = 3,
         **settings):
    ctx = BuildContext(target=target, target_runner=make_runner(target.model, backend), draft=draft, sampling=sp,
                       device=CPU, backend=backend)
    proposer = DraftModelProposer(ctx, k=k, **settings)
    engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=max_new, eos_ids=set(), device=CPU)
    prompts = ragged_prompts(V)[:4]
    rows = []
    for s in range(0, len(prompts), bsz):
        rows += engine.generate(prompts[s : s + bsz])[0]
    if backend == "transformers":  # the fallback runner on both sides (the draft's under its vocabulary guard)
        assert isinstance(engine.target, TransformersRunner) and isinstance(proposer.runner.runner, TransformersRunner)
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
    original = proposer.propose

    def spy(state):
        d = original(state)
        trees.append((state.tokens.clone(), list(state.lengths_host), d.tokens.clone(), d.parents.clone()))
        return d

    proposer.propose = spy
    engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=6, eos_ids=set(), device=CPU)
    engine.generate(ragged_prompts(V)[:bsz])
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


@pytest.mark.parametrize("bsz", [1, 4])
def test_a_dynamic_tree_of_fewer_nodes_than_its_depth_is_lossless(pair, bsz):
    """num_nodes < k: the accepted path is at most num_nodes long, shorter than the k columns the engine's commit
    works in (k=5, 3 nodes: a width mismatch crashed the verify until 2026-12-03). T = 0 output equals greedy
    decoding; a one-wide self-draft of 3 nodes accepts exactly 3 a step."""
    target, draft = pair
    prompts, rows = _run(target, draft, SamplingParams(), bsz, k=5, tree="dynamic", top_k=2, num_nodes=3)
    assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 12)
    assert sum(r.accepted_tokens for r in rows) > 0
    _, rows = _run(target, target, SamplingParams(), bsz, max_new=13, k=5, tree="dynamic", top_k=1, num_nodes=3)
    assert all(r.accepted_tokens == 3 * r.drafts for r in rows)


def test_a_dynamic_tree_under_fixed_catch_up_shapes_drafts_the_same_trees(pair):
    """Under CUDA graphs the catch-up has one shape: a dynamic tree then re-feeds K+1 committed tokens every step
    (its tree went to scratch slots, where siblings share a position). Forced on here (it is on only on CUDA), it
    must draft the same trees as the catch-up of exactly the unseen tokens: no accepted token may be missing from
    the draft's cache."""
    target, _ = pair
    draft = perturbed(target, 0.05)  # close to the target: most steps accept 2-3 depths, through any frontier node
    sp = SamplingParams()
    results = []
    for fixed in (False, True):
        ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=sp, device=CPU)
        proposer = DraftModelProposer(ctx, k=3, tree="dynamic", top_k=2, num_nodes=6)
        proposer.fixed_catch_up = fixed
        engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=13, eos_ids=set(), device=CPU)
        rows, _ = engine.generate(ragged_prompts(V)[:4])
        results.append([(r.output_ids, r.accepted_at) for r in rows])
    assert results[0] == results[1]
    assert sum(sum(a[1:]) for _, a in results[0]) > 10  # enough steps accepted past depth 1 to miss a token

# --- trees on the transformers fallback runner (engine.backend=transformers) ---------------------------------


@pytest.mark.parametrize("bsz", [1, 4])
@pytest.mark.parametrize("settings", [dict(tree="topk", top_k=3), dict(tree="dynamic", top_k=2, num_nodes=5)],
                         ids=["topk", "dynamic"])
def test_trees_on_the_transformers_backend_are_lossless_at_t0(pair, bsz, settings):
    """Target and draft both on TransformersRunner: the target verifies each tree through a custom 4-D mask and moves
    the accepted path with move_kv; the dynamic tree's frontier forwards see their ancestors at the draft's scratch
    slots. T = 0 output equals transformers' greedy decoding; the trees do accept drafts."""
    target, draft = pair
    prompts, rows = _run(target, draft, SamplingParams(), bsz, backend="transformers", **settings)
    assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 12)
    nodes = 3 * settings["top_k"] if settings["tree"] == "topk" else settings["num_nodes"]
    assert all(r.draft_tokens == nodes * r.drafts for r in rows)
    assert sum(r.accepted_tokens for r in rows) > 0


def test_a_self_draft_tree_on_the_transformers_backend_accepts_its_whole_chain_at_t1(pair):
    target, _ = pair
    _, rows = _run(target, target, SamplingParams(temperature=1.0, seed=3), 4, max_new=13, backend="transformers",
                   tree="topk", top_k=2)
    assert all(r.accepted_tokens == 3 * r.drafts for r in rows)


@pytest.mark.parametrize("settings", [dict(tree="topk", top_k=3), dict(tree="dynamic", top_k=2, num_nodes=5)],
                         ids=["topk", "dynamic"])
def test_the_transformers_backend_drafts_and_verifies_as_our_decoder_does(pair, settings):
    """Output equality alone misses small errors in the tree logits (an argmax seldom flips on a tiny model), so
    step by step: the same trees drafted and the same verify logits (1e-4) on both backends, at a ragged batch."""

    def record(backend: str):
        ctx = BuildContext(target=pair[0], target_runner=make_runner(pair[0].model, backend), draft=pair[1],
                           sampling=SamplingParams(), device=CPU, backend=backend)
        proposer = DraftModelProposer(ctx, k=3, **settings)
        drafts, logits = [], []
        propose = proposer.propose
        proposer.propose = lambda state: drafts.append(d := propose(state)) or d

        class Spy(RunnerWrapper):
            def __call__(self, *args, **kwargs):
                out = self.runner(*args, **kwargs)
                logits.append(out.logits)
                return out

        spy = Spy()
        spy.runner = ctx.target_runner
        engine = Engine(spy, proposer, Verifier(SamplingParams(), CPU), max_new_tokens=12, eos_ids=set(), device=CPU)
        engine.generate(ragged_prompts(V)[:4])
        return drafts, logits

    (d_hf, l_hf), (d_ours, l_ours) = record("transformers"), record("native")
    assert len(d_hf) == len(d_ours) and len(l_hf) == len(l_ours) == len(d_ours) + 1  # + the prefill
    for a, b in zip(d_hf, d_ours):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)
    for a, b in zip(l_hf, l_ours):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


class FakePerTokenAttention(RunnerWrapper):
    """A fake for these tests: the target's runner, saying that its verify attends per token (as our decoder's
    bit-invariant bf16 path does on a CPU with AMX), so that tree=auto meets both answers on any machine."""

    verify_attends_per_token = True

    def __call__(self, *args, **kwargs):
        return self.runner(*args, **kwargs)


@pytest.mark.parametrize("bsz", [1, 4])
def test_tree_auto_drafts_the_dynamic_tree_or_the_chain_as_the_target_verifies(pair, bsz):
    """strategy.tree=auto: the dynamic tree where the target's runner verifies a tree for the cost of its products
    (float32 here: not per token), the chain (top_k and num_nodes dropped) where it attends per verified token; each
    drafts what its explicit setting drafts, and T = 0 output is greedy decoding's."""
    target, draft = pair
    settings = dict(top_k=2, num_nodes=4, k_schedule="confidence", confidence_threshold=0.3)
    direct = make_runner(target.model)
    assert direct.verify_attends_per_token is False and direct.verify_attends_per_token == direct.cpu_invariant
    prompts, auto_rows = _run(target, draft, SamplingParams(), bsz, k=4, tree="auto", **settings)
    _, tree_rows = _run(target, draft, SamplingParams(), bsz, k=4, tree="dynamic", **settings)
    want = hf_greedy(target.model, prompts, 12)
    assert [r.output_ids for r in auto_rows] == want == [r.output_ids for r in tree_rows]
    assert [(r.draft_tokens, r.accepted_tokens) for r in auto_rows] == [(r.draft_tokens, r.accepted_tokens) for r in tree_rows]

    per_token = FakePerTokenAttention()
    per_token.runner = make_runner(target.model)
    ctx = BuildContext(target=target, target_runner=per_token, draft=draft, sampling=SamplingParams(), device=CPU)
    proposer = DraftModelProposer(ctx, k=4, tree="auto", **settings)
    assert (proposer.tree, proposer.top_k, proposer.num_nodes) == ("chain", 1, 0)
    for runner, shape in [(per_token, "chain"), (direct, "dynamic")]:  # a threshold per shape: the resolved one's
        ctx_t = BuildContext(target=target, target_runner=runner, draft=draft, sampling=SamplingParams(), device=CPU)
        p = DraftModelProposer(ctx_t, k=4, tree="auto", top_k=2, num_nodes=4, k_schedule="confidence",
                               confidence_threshold={"chain": 0.25, "dynamic": 0.45})
        assert (p.tree, p.confidence_threshold) == (shape, {"chain": 0.25, "dynamic": 0.45}[shape])
    engine = Engine(per_token, proposer, Verifier(SamplingParams(), CPU), max_new_tokens=12, eos_ids=set(), device=CPU)
    chain_auto = [r for s in range(0, 4, bsz) for r in engine.generate(prompts[s : s + bsz])[0]]
    _, chain_rows = _run(target, draft, SamplingParams(), bsz, k=4, k_schedule="confidence", confidence_threshold=0.3)
    assert [r.output_ids for r in chain_auto] == want
    assert [(r.draft_tokens, r.accepted_tokens) for r in chain_auto] == [(r.draft_tokens, r.accepted_tokens) for r in chain_rows]
    assert [(r.draft_tokens, r.accepted_tokens) for r in chain_auto] != [(r.draft_tokens, r.accepted_tokens) for r in auto_rows]


def test_tree_auto_takes_a_dynamic_trees_settings_and_rules():
    """tree=auto may become a dynamic tree, so its settings must fit one, before anything resolves it; and the
    schedules a tree refuses are refused for it."""
    with pytest.raises(ConfigError, match="num_nodes=40 .* tree=auto"):
        trees.check_tree("eagle", "chain", "auto", 2, 40, None, 4)
    with pytest.raises(ConfigError, match="tree=auto for strategy 'medusa'"):
        trees.check_tree("medusa", "parallel", "auto", 2, 4, None, 4)
    with pytest.raises(ConfigError, match="tree=auto for strategy 'ngram'"):
        trees.check_tree("ngram", "lookup", "auto", 2, 4, None, 4)
    with pytest.raises(ConfigError, match="heuristic .*tree=auto"):
        DraftModelProposer.validate({"name": "d", "k": 4, "tree": "auto", "top_k": 2, "num_nodes": 4,
                                     "k_schedule": "heuristic"})
    DraftModelProposer.validate({"name": "d", "k": 4, "tree": "auto", "top_k": 2, "num_nodes": 4,
                                 "k_schedule": "confidence", "confidence_threshold": 0.3})
    for bad, tree in [({"chain": 0.3, "dynamic": 0.4}, "dynamic"), ({"chain": 0.3}, "auto"),
                      ({"chain": 0.3, "dynamic": 1.0}, "auto"), ({"chain": 0.3, "tree": 0.4}, "auto")]:
        with pytest.raises(ConfigError, match=r"confidence_threshold=.* with tree=.*mapping \{chain: x, dynamic: y\}"):
            DraftModelProposer.validate({"name": "d", "k": 4, "tree": tree, "top_k": 2, "num_nodes": 4,
                                         "k_schedule": "confidence", "confidence_threshold": bad})
    assert trees.resolve_auto("topk", FakePerTokenAttention()) == "topk"  # only auto is resolved
    assert trees.resolve_auto("auto", object()) == "dynamic"  # a runner that does not say: the transformers backend
