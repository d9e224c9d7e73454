"""The engine's losslessness: greedy equality with transformers' generate, exact AL for a self-draft,
and the target's distribution at T > 0 (with a mutation check that the test can fail)."""

from __future__ import annotations

import time

import pytest
import torch
from specbench_testing import chisquare_pvalue, hf_greedy, perturbed, ragged_prompts, resample_from_p, tiny

from specbench.engine import Engine
from specbench.models.decoder import ForwardOutput
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.draft_model import DraftModelProposer
from specbench.strategies.none import TargetOnly
from specbench.verify import SamplingParams, Verifier, logits_to_probs

CPU = torch.device("cpu")


def _decode(ctx, proposer, prompts, batch_size, max_new, params=SamplingParams(), eos=frozenset(), rule=None):
    engine = Engine(ctx.target_runner, proposer, Verifier(params, CPU, rule=rule), max_new_tokens=max_new,
                    eos_ids=set(eos), device=CPU)
    rows = []
    for s in range(0, len(prompts), batch_size):
        rows += engine.generate(prompts[s : s + batch_size])[0]
    return rows


def _ctx(target, draft, params=SamplingParams()) -> BuildContext:
    return BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=params, device=CPU)


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_greedy_none_and_draft_model_equal_transformers_generate(arch):
    target = tiny(arch)
    draft = perturbed(target, 0.3)  # agrees often, not always: partial acceptance and rollback happen
    prompts = ragged_prompts(target.vocab_size)
    expected = hf_greedy(target.model, prompts, 20)
    ctx = _ctx(target, draft)
    for batch_size in (1, 4):
        rows = _decode(ctx, TargetOnly(ctx), prompts, batch_size, 20)
        assert [r.output_ids for r in rows] == expected
        for k in (1, 3, 5):
            rows = _decode(ctx, DraftModelProposer(ctx, k=k), prompts, batch_size, 20)
            assert [r.output_ids for r in rows] == expected, f"k={k} batch={batch_size}"
            accepted = sum(r.accepted_tokens for r in rows)
            assert 0 < accepted < sum(r.draft_tokens for r in rows)  # rejection really happened


def test_rows_finish_independently_at_eos():
    target = tiny("tiny-llama")
    prompts = ragged_prompts(target.vocab_size)[:4]
    full = hf_greedy(target.model, prompts, 16)
    eos = full[0][3]  # row 0 stops at its 4th token; the others stop wherever eos first appears
    expected = [out[: out.index(eos) + 1] if eos in out else out for out in full]
    ctx = _ctx(target, perturbed(target, 0.3))
    rows = _decode(ctx, DraftModelProposer(ctx, k=3), prompts, 4, 16, eos={eos})
    assert [r.output_ids for r in rows] == expected
    assert rows[0].finished_by == "eos" and len(rows[0].output_ids) == 4


def test_continuous_batching_refills_slots_and_times_requests_from_admission():
    """7 prompts over 3 slots with EOS: every prompt's output is its own greedy decoding cut at EOS (as at static
    batch 1), a slot is refilled while the others decode, and each request's times count from its admission."""
    target = tiny("tiny-llama")
    prompts = ragged_prompts(target.vocab_size)[:7]
    full = hf_greedy(target.model, prompts, 16)
    eos = max({t for out in full for t in out[1:12]}, key=lambda t: sum(t in out[1:12] for out in full))
    expected = [out[: out.index(eos) + 1] if eos in out else out for out in full]
    assert len({len(e) for e in expected}) > 2, "rows should finish at different steps"
    ctx = _ctx(target, perturbed(target, 0.3))
    engine = Engine(ctx.target_runner, DraftModelProposer(ctx, k=3), Verifier(SamplingParams(), CPU), max_new_tokens=16,
                    eos_ids={eos}, device=CPU)
    emitted = []
    rows, timing = engine.generate(prompts, on_step=emitted.append, concurrency=3)
    assert [r.output_ids for r in rows] == expected
    assert sum(emitted) == sum(len(e) for e in expected)  # the progress callback saw every token, first ones too
    steps_alone = [r.drafts for r in _decode(ctx, DraftModelProposer(ctx, k=3), prompts, 1, 16, eos={eos})]
    assert [r.drafts for r in rows] == steps_alone  # a request takes as many steps as it does alone
    assert timing.steps < sum(steps_alone)  # ... but several of them run at once
    for r in rows:  # per request, from its admission: first token, then its steps, then the end
        assert 0 < r.ttft_s <= r.emissions[-1][0] == r.latency_s <= timing.total_s
    assert 0 < timing.prefill_s < timing.total_s
    engine.max_new_tokens = 1  # every request ends at its first token: slots refill at once, until the queue is empty
    rows, timing = engine.generate(prompts, concurrency=3)
    assert [r.output_ids for r in rows] == [e[:1] for e in expected] and timing.steps == 0


class _FakeClock:
    """Test double for time.perf_counter: each reading advances it by a microsecond, `advance` by as much as asked, so
    the engine's timing of the phases is exact whatever else the machine runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


INGESTION_S = 1000.0  # what the slow ingestion below costs on the fake clock


class _SlowIngestion(DraftModelProposer):
    """Test double: a draft model whose ingestion of the prompts (its own prefill) takes INGESTION_S longer on the
    fake clock."""

    clock: _FakeClock

    def start(self, state, prefill_hidden):
        self.clock.advance(INGESTION_S)
        super().start(state, prefill_hidden)


def test_a_draft_models_prefill_is_prefill_time_not_decode_time(monkeypatch):
    """The drafter reading the prompts (proposer.start) is timed as prefill, as under continuous batching, so the
    whole-batch decode throughput counts decode steps only; the rows' TTFT stays the target's first token. On a fake
    clock (the engine reads time.perf_counter): a wall-clock bound failed once on a loaded machine."""
    clock = _FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    target = tiny("tiny-llama")
    ctx = _ctx(target, perturbed(target, 0.3))
    proposer = _SlowIngestion(ctx, k=3)
    proposer.clock = clock
    engine = Engine(ctx.target_runner, proposer, Verifier(SamplingParams(), CPU), max_new_tokens=8,
                    eos_ids=set(), device=CPU)
    rows, timing = engine.generate(ragged_prompts(target.vocab_size)[:3])
    assert timing.draft_prefill_s >= INGESTION_S
    assert timing.prefill_s >= timing.draft_prefill_s + max(r.ttft_s for r in rows)
    assert all(r.ttft_s < INGESTION_S for r in rows)  # the first token does not wait for the drafter
    assert timing.total_s - timing.prefill_s < INGESTION_S  # decode time: the steps, without the drafter's prefill
    rows, timing = Engine(ctx.target_runner, TargetOnly(ctx), Verifier(SamplingParams(), CPU), max_new_tokens=8,
                          eos_ids=set(), device=CPU).generate(ragged_prompts(target.vocab_size)[:3])
    assert timing.draft_prefill_s < 0.05  # nothing to ingest


@pytest.mark.slow
def test_greedy_equality_on_real_weights(smollm2):
    """SmolLM2-135M (the packaged real model), 8 real prompts, batch 1 and 4, fp32."""
    from specbench.data import encode_prompt, load_prompts

    prompts = [encode_prompt(p, smollm2.tokenizer) for p in load_prompts({"name": "builtin", "num_prompts": 8})]
    assert len({len(p) for p in prompts[:4]}) > 1
    expected = hf_greedy(smollm2.model, prompts, 12)
    ctx = _ctx(smollm2, perturbed(smollm2, 0.05))
    for batch_size in (1, 4):
        assert [r.output_ids for r in _decode(ctx, TargetOnly(ctx), prompts, batch_size, 12)] == expected
        rows = _decode(ctx, DraftModelProposer(ctx, k=3), prompts, batch_size, 12)
        assert [r.output_ids for r in rows] == expected
        assert 0 < sum(r.accepted_tokens for r in rows) < sum(r.draft_tokens for r in rows)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_self_draft_accepts_everything(temperature):
    target = tiny("tiny-qwen3")
    params = SamplingParams(temperature=temperature, seed=3)
    ctx = _ctx(target, target, params)
    rows = _decode(ctx, DraftModelProposer(ctx, k=3), ragged_prompts(target.vocab_size), 4, 17, params)
    drafts = sum(r.drafts for r in rows)
    assert 1 + sum(r.accepted_tokens for r in rows) / drafts == 4.0


# --- T > 0: the emitted tokens follow the target's distribution ------------------------------------


def _exact_marginals(target, prompt: list[int], params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact distributions of the first and second generated tokens under the target."""
    with torch.no_grad():
        p1 = logits_to_probs(target.model(torch.tensor([prompt])).logits[0, -1], params)  # [V]
        vocab = p1.shape[0]
        seqs = torch.cat([torch.tensor([prompt]).expand(vocab, -1), torch.arange(vocab)[:, None]], 1)
        p2_given = logits_to_probs(target.model(seqs).logits[:, -1], params)  # [V, V]
    return p1, p1 @ p2_given


def _sample_two_tokens(params: SamplingParams, rule=None, n: int = 6000):
    target = tiny("tiny-llama")
    draft = perturbed(target, 2.0)  # a poor draft: many rejections, so the residual matters
    prompt = ragged_prompts(target.vocab_size, lengths=(6,), seed=7)[0]
    ctx = _ctx(target, draft, params)
    rows = _decode(ctx, DraftModelProposer(ctx, k=2), [prompt] * n, n, 2, params, rule=rule)
    out = torch.tensor([r.output_ids for r in rows])  # [n, 2]
    p1, p2 = _exact_marginals(target, prompt, params)
    c1 = torch.bincount(out[:, 0], minlength=p1.shape[0])
    c2 = torch.bincount(out[:, 1], minlength=p1.shape[0])
    acc = sum(r.accepted_tokens for r in rows) / sum(r.draft_tokens for r in rows)
    return c1, p1, c2, p2, acc


SHAPES = [
    SamplingParams(temperature=0.6, seed=1),
    SamplingParams(temperature=0.8, top_k=12, seed=2),
    SamplingParams(temperature=0.7, top_p=0.6, seed=3),
]


@pytest.mark.parametrize("params", SHAPES, ids=["T", "T+top_k", "T+top_p"])
def test_speculative_sampling_follows_the_target_distribution(params):
    c1, p1, c2, p2, acc = _sample_two_tokens(params)
    assert 0.05 < acc < 0.95  # both acceptance and rejection are exercised
    assert chisquare_pvalue(c1, p1) > 1e-4
    assert chisquare_pvalue(c2, p2) > 1e-4


def test_the_distribution_test_fails_against_a_wrong_acceptance_rule():
    c1, p1, c2, p2, _ = _sample_two_tokens(SHAPES[0], rule=resample_from_p)
    assert min(chisquare_pvalue(c1, p1), chisquare_pvalue(c2, p2)) < 1e-6


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_target_only_run_ahead_of_the_sync_changes_no_token(temperature):
    """Engine.target_runs_ahead (on where the target replays CUDA graphs; forced on here over the graph runner's eager
    path): target-only decoding's next forward is launched before the step's sync. Every row's tokens equal those of
    the same run without it, at T = 0 (transformers' greedy tokens, cut at the stop token) and at T = 1 (the same
    seed), with rows that end at different steps (a stop token), and the phase clock still gives each step its
    three phases."""
    from specbench_testing import cut_at_commonest_token

    from specbench.models.cuda_graphs import GraphedRunner

    target = tiny("tiny-llama")
    prompts = ragged_prompts(101, (5, 9, 3))
    stop, cut = cut_at_commonest_token(hf_greedy(target.model, prompts, 15))
    assert len({len(c) for c in cut}) > 1  # rows end apart
    sp = SamplingParams(temperature=temperature, seed=5)
    runs = []
    for ahead in (False, True):
        runner = GraphedRunner(make_runner(target.model), capture=False)
        ctx = BuildContext(target=target, target_runner=runner, draft=None, sampling=sp, device=CPU)
        engine = Engine(runner, TargetOnly(ctx), Verifier(sp, CPU), max_new_tokens=15, eos_ids={stop}, device=CPU)
        assert not engine.target_runs_ahead  # off on the CPU unless asked
        engine.target_runs_ahead = ahead
        rows, timing = engine.generate(prompts)
        assert timing.verify_s > 0 and timing.steps == max(len(r.output_ids) for r in rows) - 1
        runs.append([r.output_ids for r in rows])
    assert runs[0] == runs[1]
    if temperature == 0:
        assert runs[1] == cut


class _StaticOutputsRunner:
    """A fake runner (test only): the real one, with every forward's outputs copied into buffers that the next forward
    of the same shape overwrites, and views of them returned, as a CUDA graph's replays hand out its static outputs."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.buffers: dict[tuple, ForwardOutput] = {}

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def __call__(self, tokens, positions, **kwargs) -> ForwardOutput:
        out = self.runner(tokens, positions, **kwargs)
        key = (tuple(tokens.shape), out.hidden is None, len(out.layer_hidden))
        buf = self.buffers.setdefault(key, ForwardOutput(
            logits=torch.empty_like(out.logits), hidden=None if out.hidden is None else torch.empty_like(out.hidden),
            layer_hidden=[torch.empty_like(h) for h in out.layer_hidden]))
        for a, b in zip([buf.logits, buf.hidden, *buf.layer_hidden], [out.logits, out.hidden, *out.layer_hidden]):
            if a is not None:
                a.copy_(b)
        return ForwardOutput(logits=buf.logits[:], hidden=None if buf.hidden is None else buf.hidden[:],
                             layer_hidden=[h[:] for h in buf.layer_hidden])


def test_a_forward_run_ahead_leaves_commit_the_steps_own_hidden_states():
    """Target-only decoding run ahead of the sync (Engine.target_runs_ahead) over a runner whose outputs the next
    forward overwrites (a CUDA graph's): a proposer that reads the step's hidden states at commit (the distillation
    recorder) must get that step's, not the forward run ahead's. Checked against the same run without the run-ahead:
    every recorded feature and top-1, bit for bit (it recorded the next position's before the engine kept them)."""
    from specbench.train.data import FeatureRecorder

    target = tiny("tiny-llama")
    prompts = ragged_prompts(101, (5, 9, 3))
    sets = []
    for ahead in (False, True):
        runner = _StaticOutputsRunner(make_runner(target.model))
        ctx = BuildContext(target=target, target_runner=runner, draft=None, sampling=SamplingParams(), device=CPU)
        recorder = FeatureRecorder(ctx, (0, 1))
        engine = Engine(runner, recorder, Verifier(SamplingParams(), CPU), max_new_tokens=7, eos_ids=set(), device=CPU)
        engine.target_runs_ahead = ahead
        rows, _ = engine.generate(prompts)
        sets.append(([r.output_ids for r in rows], recorder.hidden.clone(), recorder.layer_hidden.clone(),
                     recorder.top1.clone()))
    (tokens, hidden, layers, top1), (tokens_ahead, hidden_ahead, layers_ahead, top1_ahead) = sets
    assert tokens_ahead == tokens
    assert torch.equal(hidden_ahead, hidden) and torch.equal(layers_ahead, layers) and torch.equal(top1_ahead, top1)
