"""The proposer base: every flag changes what the base or the engine does, and the Draft contract.

Each test flips one flag on a subclass of a real strategy (tiny random models, B=3 ragged prompts)
and shows the behaviour the flag switches; a base that ignored the flag fails it.
"""

from __future__ import annotations

import pytest
import torch

from specbench_testing import hf_greedy, perturbed, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.cuda_graphs import GraphedRunner
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DecodeState, Draft, DraftOutput, Proposer
from specbench.strategies.draft_model import DraftModelProposer
from specbench.strategies.medusa import MedusaHeads, MedusaConfig, MedusaProposer
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")
V = 101  # the tiny presets' vocabulary
LENGTHS = (5, 9, 3)


@pytest.fixture(scope="module")
def target():
    return tiny("tiny-llama")


@pytest.fixture(scope="module")
def draft(target):
    return perturbed(target, 0.3)


def _ctx(target, draft=None, sp: SamplingParams = SamplingParams(), graphs: bool = False) -> BuildContext:
    return BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=sp,
                        device=CPU, cuda_graphs=graphs)


def _generate(ctx: BuildContext, proposer: Proposer, max_new: int = 10):
    engine = Engine(ctx.target_runner, proposer, Verifier(ctx.sampling, CPU), max_new_tokens=max_new,
                    eos_ids=set(), device=CPU)
    return engine.generate(ragged_prompts(V, LENGTHS))


class _Recorder:
    """Wraps a proposer's draft_forward: records (tokens, positions, hidden) of every call."""

    def __init__(self, proposer: Proposer) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        inner = proposer.draft_forward

        def forward(tokens, positions, hidden, attn_len):
            self.calls.append((tokens.clone(), positions.clone(), None if hidden is None else hidden.clone()))
            return inner(tokens, positions, hidden, attn_len)

        proposer.draft_forward = forward


# --- owns_kv_cache ---------------------------------------------------------------------------------


class _NoCacheDraft(DraftModelProposer):
    owns_kv_cache = False


def test_owns_kv_cache_ingests_the_prompt_and_catches_up(target, draft):
    """With its own cache the draft ingests the prompts in start() and each step feeds what it has not seen;
    without, nothing is ingested and every step starts from the pending token alone."""
    with_cache = DraftModelProposer(_ctx(target, draft), k=3)
    rec = _Recorder(with_cache)
    rows, _ = _generate(_ctx(target, draft), with_cache)
    assert rec.calls[0][1].shape == (3, max(LENGTHS))  # the prompts, right-padded, before the first step
    widths = {c[1].shape[1] for c in rec.calls[1:]}
    assert 2 in widths  # a step after all K were accepted feeds d_K and the bonus token together
    assert with_cache.draft_forwards == sum(1 for c in rec.calls[1:])

    without = _NoCacheDraft(_ctx(target, draft), k=3)
    rec = _Recorder(without)
    rows_nc, _ = _generate(_ctx(target, draft), without)
    assert all(c[1].shape[1] == 1 for c in rec.calls)  # never a prompt, never a catch-up
    # losslessness never depends on the draft: both equal target-only greedy decoding
    want = hf_greedy(target.model, ragged_prompts(V, LENGTHS), 10)
    assert [r.output_ids for r in rows] == want == [r.output_ids for r in rows_nc]


# --- samples ---------------------------------------------------------------------------------------


class _ArgmaxDraft(DraftModelProposer):
    samples = False


def test_samples_returns_q_at_positive_temperature(target, draft):
    sp = SamplingParams(temperature=1.0, seed=3)
    sampler = DraftModelProposer(_ctx(target, draft, sp), k=3)
    greedy = _ArgmaxDraft(_ctx(target, draft, sp), k=3)
    seen: dict[str, list[Draft]] = {"sampler": [], "greedy": []}
    for key, prop in (("sampler", sampler), ("greedy", greedy)):
        inner = prop.propose
        prop.propose = lambda s, inner=inner, key=key: seen[key].append(inner(s)) or seen[key][-1]
        _generate(_ctx(target, draft, sp), prop, max_new=6)
    assert all(d.probs is not None and d.probs.shape == (3, 3, V) for d in seen["sampler"])
    assert all(d.probs is None for d in seen["greedy"])  # one-hot q: the verifier treats drafts as certain


def test_samples_draws_from_q_through_the_shared_sampler(target, draft):
    """With samples on, the drafted token follows q (chi-square over repeated single-step drafts)."""
    from specbench_testing import chisquare_pvalue

    sp = SamplingParams(temperature=1.0, seed=0)
    prop = DraftModelProposer(_ctx(target, draft, sp), k=1)
    prompts = [[5, 7, 9]]
    tokens = torch.tensor([prompts[0] + [11] + [0] * 8])
    state = DecodeState(tokens=tokens, lengths=torch.tensor([4]), lengths_host=[4], prompt_lengths=[3],
                        active=torch.tensor([True]), max_len=12)
    prop.start(state, None)
    counts = torch.zeros(V)
    q = None
    for _ in range(3000):
        prop.seen = [3]
        d = prop.propose(state)
        counts[d.tokens[0, 0]] += 1
        q = d.probs[0, 0]
    assert chisquare_pvalue(counts, q) > 1e-3


class _ReducedVocabDraft(DraftModelProposer):
    """A draft whose logits are kept on 7 of the 101 ids and returned over those 7 columns with their ids, as an
    EAGLE-3 head's reduced draft vocabulary (d2t) is; FULL=True returns the same logits over all 101 ids."""

    IDS = torch.tensor([2, 11, 12, 30, 57, 58, 99])  # ascending, as d2t's target ids are
    FULL = False

    def draft_forward(self, tokens, positions, hidden, attn_len, slots=None, tree_path=None):
        out = super().draft_forward(tokens, positions, hidden, attn_len, slots, tree_path)
        reduced = DraftOutput(logits=out.logits[..., self.IDS], hidden=out.hidden, vocab_ids=self.IDS, vocab_size=V)
        return reduced.full() if self.FULL else reduced


class _ReducedVocabDraftFull(_ReducedVocabDraft):
    FULL = True


@pytest.mark.parametrize("settings", [dict(), dict(k_schedule="confidence", confidence_threshold=0.3),
                                      dict(tree="topk", top_k=2), dict(tree="static"),
                                      dict(tree="dynamic", top_k=2, num_nodes=5),
                                      dict(tree="dynamic", top_k=2, num_nodes=5, k_schedule="confidence")],
                         ids=["chain", "chain-confidence", "topk", "static", "dynamic", "dynamic-confidence"])
def test_a_reduced_vocabulary_drafts_what_its_full_logits_would(target, draft, settings):
    """A chain or a tree over a reduced vocabulary ranks, picks and stops on its own columns and returns target ids:
    the same drafts, steps and output as the same logits spread over the whole vocabulary (-inf elsewhere), and the
    target's."""
    got = {}
    for cls in (_ReducedVocabDraft, _ReducedVocabDraftFull):
        prop = cls(_ctx(target, draft), k=3, **settings)
        drafts: list[Draft] = []
        inner = prop.propose
        prop.propose = lambda s, inner=inner, drafts=drafts: drafts.append(inner(s)) or drafts[-1]
        rows, _ = _generate(_ctx(target, draft), prop)
        got[cls] = ([r.output_ids for r in rows], drafts)
        assert all(bool(torch.isin(d.tokens, cls.IDS).all()) for d in drafts)
    (out_r, drafts_r), (out_f, drafts_f) = got.values()
    assert len(drafts_r) == len(drafts_f)
    assert all(torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents) for a, b in zip(drafts_r, drafts_f))
    assert out_r == out_f == hf_greedy(target.model, ragged_prompts(V, LENGTHS), 10)


def test_a_reduced_vocabulary_samples_q_on_the_target_ids(target, draft):
    """At T > 0 a reduced vocabulary's draft is drawn over its columns and mapped to target ids; q comes back over
    the target's 101 ids, zero off the 7, equal to the full logits' softmax, and the draws follow it (chi-square)."""
    from specbench_testing import chisquare_pvalue

    sp = SamplingParams(temperature=1.0, seed=0)
    prop = _ReducedVocabDraft(_ctx(target, draft, sp), k=1)
    tokens = torch.tensor([[5, 7, 9, 11] + [0] * 8])
    state = DecodeState(tokens=tokens, lengths=torch.tensor([4]), lengths_host=[4], prompt_lengths=[3],
                        active=torch.tensor([True]), max_len=12)
    prop.start(state, None)
    full = _ReducedVocabDraftFull(_ctx(target, draft, sp), k=1)
    full.start(state, None)
    full.seen = [3]
    want = full.propose(state).probs[0, 0]  # [V] softmax of the logits spread over all ids
    counts = torch.zeros(V)
    for _ in range(3000):
        prop.seen = [3]
        d = prop.propose(state)
        counts[d.tokens[0, 0]] += 1
    q = d.probs[0, 0]
    assert q.shape == (V,)
    torch.testing.assert_close(q, want, rtol=1e-5, atol=1e-7)
    off = torch.ones(V, dtype=torch.bool)
    off[_ReducedVocabDraft.IDS] = False
    assert bool((q[off] == 0).all()) and counts[off].sum() == 0
    assert chisquare_pvalue(counts, q) > 1e-3


def test_a_reduced_vocabulary_draws_a_tree_over_its_columns(target, draft):
    """At T > 0 a dynamic tree over a reduced vocabulary draws over the columns and returns target ids and q over the
    target's ids: the root's first child follows q0, the full logits' softmax (chi-square); nothing off the 7 ids."""
    from specbench_testing import chisquare_pvalue

    sp = SamplingParams(temperature=1.0, seed=0)
    settings = dict(k=2, tree="dynamic", top_k=2, num_nodes=3)
    prop = _ReducedVocabDraft(_ctx(target, draft, sp), **settings)
    tokens = torch.tensor([[5, 7, 9, 11] + [0] * 12])
    state = DecodeState(tokens=tokens, lengths=torch.tensor([4]), lengths_host=[4], prompt_lengths=[3],
                        active=torch.tensor([True]), max_len=16)
    full = _ReducedVocabDraftFull(_ctx(target, draft, sp), **settings)
    full.start(state, None)
    full.seen = [3]
    want = full.propose(state).probs[0, 0]  # [V] q0, the first draw's distribution
    prop.start(state, None)
    off = torch.ones(V, dtype=torch.bool)
    off[_ReducedVocabDraft.IDS] = False
    counts = torch.zeros(V)
    for _ in range(2000):
        prop.seen = [3]
        d = prop.propose(state)
        counts[d.tokens[0, 0]] += 1
        assert d.probs.shape == (1, 3, V) and bool((d.probs[0][:, off] == 0).all())
        assert bool(torch.isin(d.tokens, _ReducedVocabDraft.IDS).all())
    torch.testing.assert_close(d.probs[0, 0], want, rtol=1e-5, atol=1e-7)
    assert chisquare_pvalue(counts, want) > 1e-3


# --- pass_hidden_states_to_model -----------------------------------------------------------------------


def _medusa(target, tmp_path, cls=MedusaProposer):
    heads = MedusaHeads(MedusaConfig(hidden_size=target.model.config.hidden_size, num_heads=3,
                                     vocab_size=target.model.config.vocab_size), target.model)
    heads.save(tmp_path)
    return cls(_ctx(target), k=3, checkpoint=str(tmp_path))


class _FeaturelessMedusa(MedusaProposer):
    pass_hidden_states_to_model = False


def test_pass_hidden_states_feeds_the_feature_before_each_token(target, tmp_path):
    """The engine returns the target's hidden states only to strategies with the flag, and the base feeds the
    draft, with the pending token at L-1, the target's final-norm hidden state at L-2."""
    prop = _medusa(target, tmp_path)
    rec = _Recorder(prop)
    rows, _ = _generate(_ctx(target), prop, max_new=6)
    prompts = ragged_prompts(V, LENGTHS)
    for b, (p, row) in enumerate(zip(prompts, rows)):
        seq = torch.tensor([p + row.output_ids])
        with torch.no_grad():
            ref = target.model(seq, output_hidden_states=True).hidden_states[-1][0]  # [N, H] after the final norm
        for step, (tokens, positions, hidden) in enumerate(rec.calls):
            pos = int(positions[b, 0])
            if pos < seq.shape[1] and step < len(row.emissions) - 1:  # steps while the row was active
                assert tokens[b, 0] == seq[0, pos]
                torch.testing.assert_close(hidden[b, 0], ref[pos - 1], atol=1e-4, rtol=1e-4)

    blind = _medusa(target, tmp_path / "b", _FeaturelessMedusa)
    with pytest.raises(AssertionError):  # the engine no longer returns hidden states; the heads get none
        _generate(_ctx(target), blind, max_new=4)


# --- cuda_graphs ----------------------------------------------------------------------------------------


class _EagerDraft(DraftModelProposer):
    cuda_graphs = False


def test_cuda_graphs_flag_wraps_the_draft_runner(target, draft):
    """engine.cuda_graphs on: a drafter with the flag runs its runner under GraphedRunner (eager over static
    buffers on the CPU, captured on CUDA); one without keeps its plain runner."""
    graphed = DraftModelProposer(_ctx(target, draft, graphs=True), k=2)
    eager = _EagerDraft(_ctx(target, draft, graphs=True), k=2)
    off = DraftModelProposer(_ctx(target, draft, graphs=False), k=2)
    assert isinstance(graphed.runner.runner, GraphedRunner)
    assert not isinstance(eager.runner.runner, GraphedRunner)
    assert not isinstance(off.runner.runner, GraphedRunner)
    rows_g, _ = _generate(_ctx(target, draft, graphs=True), graphed, max_new=8)
    rows_e, _ = _generate(_ctx(target, draft, graphs=True), eager, max_new=8)
    assert [r.output_ids for r in rows_g] == [r.output_ids for r in rows_e]


# --- one_extra_forward_pass + drop_first_drafted_tokens ----------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_one_extra_forward_pass_same_tokens_one_more_forward(target, draft, temperature):
    sp = SamplingParams(temperature=temperature, seed=1)
    ours = DraftModelProposer(_ctx(target, draft, sp), k=3)
    seed_pr = DraftModelProposer(_ctx(target, draft, sp), k=3, one_extra_forward_pass=True,
                                 drop_first_drafted_tokens=True)
    rows_a, t_a = _generate(_ctx(target, draft, sp), ours, max_new=12)
    rows_b, t_b = _generate(_ctx(target, draft, sp), seed_pr, max_new=12)
    if temperature == 0:
        assert [r.output_ids for r in rows_a] == [r.output_ids for r in rows_b]
    assert t_a.draft_forwards == 3 * t_a.steps
    assert t_b.draft_forwards == 4 * t_b.steps


def test_one_extra_forward_pass_keeps_a_self_draft_exact(target):
    """The draft is the target: every draft is accepted in both schemes, so the draft's cache is right in both."""
    sp = SamplingParams(temperature=1.0, seed=2)
    for extra in (False, True):
        prop = DraftModelProposer(_ctx(target, target, sp), k=3, one_extra_forward_pass=extra,
                                  drop_first_drafted_tokens=extra)
        rows, _ = _generate(_ctx(target, target, sp), prop, max_new=13)
        assert all(r.accepted_tokens == 3 * r.drafts for r in rows), extra


@pytest.mark.parametrize("extra, drop", [(True, False), (False, True), ("yes", "yes")])
def test_the_scheme_flags_go_together(target, draft, extra, drop):
    with pytest.raises(ConfigError, match="one_extra_forward_pass"):
        DraftModelProposer.validate({"name": "draft_model", "k": 3, "one_extra_forward_pass": extra,
                                     "drop_first_drafted_tokens": drop})


def test_the_scheme_is_refused_where_nothing_catches_up(target, tmp_path):
    with pytest.raises(ConfigError, match="chain drafters with their own KV cache"):
        MedusaProposer.raise_if_bad_scheme("medusa", True, True)


# --- the Draft contract --------------------------------------------------------------------------------


def test_a_chain_is_parents_minus_one_zero_one():
    d = Draft(tokens=torch.zeros((2, 4), dtype=torch.long))
    assert d.chain and d.parents.tolist() == [[-1, 0, 1, 2]] * 2
    tree = Draft(tokens=torch.zeros((2, 3), dtype=torch.long), parents=torch.tensor([[-1, -1, 0], [-1, 0, 0]]))
    assert not tree.chain
    with pytest.raises(ValueError, match="parents"):
        Draft(tokens=torch.zeros((2, 3), dtype=torch.long), parents=torch.tensor([[-1, 0]]))


class _TreeDraft(DraftModelProposer):
    def propose(self, state):
        d = super().propose(state)
        return Draft(tokens=d.tokens, parents=torch.full_like(d.tokens, -1))


def test_the_engine_verifies_any_tree_a_strategy_returns(target, draft):
    """A draft whose nodes all hang under the pending token (K siblings) is verified as a tree: lossless."""
    rows, _ = _generate(_ctx(target, draft), _TreeDraft(_ctx(target, draft), k=2), max_new=6)
    assert [r.output_ids for r in rows] == hf_greedy(target.model, ragged_prompts(V, LENGTHS), 6)


def test_parallel_drafting_is_one_forward_per_step(target, tmp_path):
    prop = _medusa(target, tmp_path)
    _, timing = _generate(_ctx(target), prop, max_new=8)
    assert timing.draft_forwards == timing.steps
    assert isinstance(prop.draft_forward(torch.zeros((1, 1), dtype=torch.long), torch.ones((1, 1), dtype=torch.long),
                                         torch.zeros((1, 1, target.model.config.hidden_size)), 4), DraftOutput)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_catch_up_run_ahead_of_the_sync_changes_no_token(target, monkeypatch, temperature):
    """Proposer.prelaunch: under fixed_catch_up (forced on here; on CUDA it is on with graphs) the engine runs the next
    step's catch-up forward before it waits for the step's result, at the lengths the device computes. Every row's
    tokens, acceptances and draft count equal those of the same run without it, at T = 0 (target-only decoding's
    tokens) and at T = 1 (the same seed), while rows finish at different steps (a finished row's garbage forward must
    not reach the others)."""
    draft = perturbed(target, 0.05 if temperature == 0 else 0.3)  # rows advance (and end) at different steps
    sp = SamplingParams(temperature=temperature, seed=3)
    prompts = ragged_prompts(V, (5, 9, 3, 12))
    runs, used = [], []
    for ahead in (False, True):
        with monkeypatch.context() as m:
            if not ahead:
                m.setattr(DraftModelProposer, "prelaunches", property(lambda self: False))
            prop = DraftModelProposer(_ctx(target, draft, sp, graphs=True), k=3)
            prop.fixed_catch_up = True
            real = prop.prelaunch
            m.setattr(prop, "prelaunch", lambda *a: used.append(real(*a)) or used[-1])
            engine = Engine(make_runner(target.model), prop, Verifier(sp, CPU), max_new_tokens=17, eos_ids=set(),
                            device=CPU)
            rows, timing = engine.generate(prompts)
        runs.append(([(r.output_ids, r.accepted_at, r.drafts) for r in rows], timing.steps, timing.draft_forwards))
        if ahead:
            assert sum(used) >= timing.steps - 3 and len(set(r.drafts for r in rows)) > 1  # ran; rows ended apart
            assert timing.draft_s > 0 and timing.verify_s > 0
        else:
            assert not used
    assert runs[0] == runs[1]
    if temperature == 0:
        assert [out for out, _, _ in runs[1][0]] == hf_greedy(target.model, prompts, 17)
