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
    with pytest.raises(ConfigError, match="tree=topk for strategy 'ngram'"):
        NgramProposer.raise_if_bad_tree("ngram", "topk", 2)
    MedusaProposer.raise_if_bad_tree("medusa", "topk", 2)
