"""strategies/trees.py: tree settings, static tree shapes, and static trees drafted as their definition says."""

from __future__ import annotations

import pytest
import torch

from specbench_testing import perturbed, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies import trees
from specbench.strategies.base import BuildContext
from specbench.strategies.draft_model import DraftModelProposer
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")
V = 101


def test_default_static_tree_and_layout():
    choices = trees.default_static_choices(3)
    assert choices == ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (1, 0, 0))
    t = trees.static_tree(choices)
    assert t.parents == (-1, -1, -1, 0, 0, 1, 3, 3, 5)
    assert t.ranks == (0, 1, 2, 0, 1, 0, 0, 1, 0) and t.depths == (1, 1, 1, 2, 2, 2, 3, 3, 3)
    assert t.fed == ((0, 1), (3, 5)) and t.depth == 3 and t.width == 3
    assert len(trees.default_static_choices(1)) == 3 and len(trees.default_static_choices(5)) == 15


@pytest.mark.parametrize("choices, match", [
    ([[0], [0, 1, 2]], r"lacks the prefixes \[\[0, 1\]\]"),
    ([[0], [0]], "repeats a path"),
    ([[0], [-1]], "tree_choices="),
    ("0,1", "tree_choices="),
    ([[0], [1]], "1 deep but strategy.k=3"),
])
def test_bad_tree_choices_are_refused(choices, match):
    with pytest.raises(ConfigError, match=match):
        trees.check_tree("draft_model", "chain", "static", 1, 0, choices, 3)


def test_tree_settings_are_refused_where_they_do_not_apply():
    with pytest.raises(ConfigError, match="tree_choices is set .* tree=dynamic"):
        trees.check_tree("eagle", "chain", "dynamic", 2, 2, [[0]], 1)
    with pytest.raises(ConfigError, match="tree=static for strategy 'ngram'"):
        trees.check_tree("ngram", "lookup", "static", 1, 0, None, 3)
    trees.check_tree("ngram", "lookup", "topk", 3, 0, None, 3)  # branches of several matches
    trees.check_tree("medusa", "parallel", "static", 1, 0, [[0], [1], [0, 0]], 2)


def _full_recompute_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0, -1]


@pytest.mark.parametrize("bsz", [1, 3])
def test_a_static_tree_is_its_definition(bsz):
    """Each node of a static tree is the rank-r candidate of the draft's distribution after its parent's path
    (transformers' full recompute as the reference), for the default tree and a lopsided one."""
    target = tiny("tiny-llama")
    draft = perturbed(target, 0.5)
    for choices in (None, [[0], [2], [0, 1], [2, 0], [2, 1], [0, 1, 0], [2, 1, 3]]):
        ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=SamplingParams(),
                           device=CPU)
        proposer = DraftModelProposer(ctx, k=3, tree="static", tree_choices=choices)
        t = proposer.static_tree
        seen = []
        original = proposer.propose

        def spy(state, original=original, seen=seen):
            d = original(state)
            seen.append((state.tokens.clone(), list(state.lengths_host), d.tokens.clone(), d.parents.clone()))
            return d

        proposer.propose = spy
        engine = Engine(ctx.target_runner, proposer, Verifier(SamplingParams(), CPU), max_new_tokens=6, eos_ids=set(),
                        device=CPU)
        engine.generate(ragged_prompts(V)[:bsz])
        for tokens, lengths, d_tokens, d_parents in seen[:2]:
            assert d_parents[0].tolist() == list(t.parents)
            for b, n in enumerate(lengths):
                prefix = tokens[b, :n].tolist()
                for i, (parent, rank) in enumerate(zip(t.parents, t.ranks)):
                    path, j = [], parent
                    while j >= 0:
                        path.insert(0, int(d_tokens[b, j]))
                        j = t.parents[j]
                    logits = _full_recompute_logits(draft.model, prefix + path)
                    top = logits.topk(rank + 2)
                    if float(top.values[rank] - top.values[rank + 1]) < 1e-6 or (
                            rank and float(top.values[rank - 1] - top.values[rank]) < 1e-6):
                        continue  # a near-tie decides the rank
                    assert int(d_tokens[b, i]) == int(top.indices[rank]), (choices, b, i)


def test_medusa_sparse_tree_takes_each_heads_ranks():
    t = trees.static_tree(((0,), (1,), (0, 0), (0, 2), (1, 1)))
    logits = torch.randn(2, 2, V, generator=torch.Generator().manual_seed(0))
    ranked = logits.topk(3, -1).indices
    got = trees.parallel_static(logits, t)
    want = torch.stack([ranked[:, 0, 0], ranked[:, 0, 1], ranked[:, 1, 0], ranked[:, 1, 2], ranked[:, 1, 1]], 1)
    assert torch.equal(got, want)
