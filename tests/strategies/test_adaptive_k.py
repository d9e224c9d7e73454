"""Adaptive K (k_schedule, k_by_batch_size on the proposer base): lossless whatever K a step drafts.

The conformance suite's checks, for every registered strategy that accepts each schedule:
a) T = 0 output through run(cfg) equals plain greedy decoding, batch 1 and batch 4 of ragged prompts, and K
   really varied (mean K drafted < k);
b) a self-draft accepts every token it drafts: AL = 1 + mean K exactly (a draft cache rolled back to the wrong
   K_step would drift and reject);
c) T > 0: the first tokens follow the target's exact marginals (chi-square), with the wrong acceptance rule
   caught for the strategies that sample;
plus the settings' ConfigErrors and the schedules' rules on their own (fakes: none; real tiny models).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from specbench_testing import perturbed, ragged_prompts, resample_from_p, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.cuda_graphs import GraphedRunner
from specbench.models.runner import make_runner
from specbench.run import available_strategies
from specbench.strategies.base import BuildContext, DecodeState
from specbench.strategies.draft_model import DraftModelProposer
from specbench.verify import SamplingParams, Verifier
from test_conformance import (CPU, MAX_NEW, PROMPT, SAMPLING, TARGETS, _compose, _plain_greedy, _pvalues, _run,
                              _settings, _strategy_class, sharp_target)  # noqa: F401 - a fixture
from test_conformance import _accepts as _validates

K = 3  # the k every run here drafts at most (strategy.k, given explicitly: a yaml's own default may differ)
# the tiny random targets are near-uniform (a draft's top probability ~0.013-0.016): this threshold cuts some steps
# short and not others (measured: mean K 1.3-2.9 for draft_model, eagle, layer_skip, medusa on tiny-llama)
SCHEDULES = {
    "heuristic": {"k_schedule": "heuristic"},
    "confidence": {"k_schedule": "confidence", "confidence_threshold": 0.0145},
    "by_batch": {"k_by_batch_size": "{1:1,3:2}"},  # 1 at batch 1; 2 while >= 3 rows are active, then 1
    # EAGLE-2's tree stops expanding once every frontier path is under the threshold (and it holds num_nodes): depth
    # 2 or 3 (measured mean depth 2.3-2.8 for draft_model, eagle, layer_skip on tiny-llama)
    "dynamic_confidence": {"tree": "dynamic", "top_k": 2, "num_nodes": 5, "k_schedule": "confidence",
                           "confidence_threshold": 2e-4},
}


def _accepts(strategy: str, extra: dict) -> bool:
    by_batch = {"k_by_batch_size": {1: 1, 3: 2}} if "k_by_batch_size" in extra else {}
    return _validates(strategy, {"k": K, **extra, **by_batch})


# every strategy yaml that drafts a chain at a fixed k, with each schedule it accepts (a preset that brings its own
# tree or schedule, eagle_tree or eagle_adaptive, would repeat its base yaml's runs here: the conformance suite runs it
# as its yaml has it)
def _drafts_a_fixed_chain(strategy: str) -> bool:
    cfg = _compose(f"strategy={strategy}").strategy
    return strategy != "none" and (cfg.get("tree", "chain"), cfg.get("k_schedule", "fixed")) == ("chain", "fixed")


FIXED_CHAINS = [s for s in available_strategies() if _drafts_a_fixed_chain(s)]
VARIANTS = [pytest.param(s, extra, id=f"{s}[{name}]") for name, extra in SCHEDULES.items()
            for s in FIXED_CHAINS if _accepts(s, extra)]


# --- a) T = 0 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("strategy, extra", VARIANTS)
def test_greedy_output_equals_plain_greedy_whatever_k(strategy, extra, target, batch_size, tmp_path):
    needs_draft = _strategy_class(strategy).needs_draft_model
    report = _run(strategy, target, tmp_path, f"engine.batch_size={batch_size}", *_settings({"k": K, **extra}),
                  *([f"draft={TARGETS[target]}"] if needs_draft else []))
    for i, o in enumerate(report.outputs):
        expected, _ = _plain_greedy(target, tuple(o["prompt_token_ids"]), MAX_NEW)
        assert o["output_token_ids"] == expected, f"{strategy} {extra} on {target}, batch {batch_size}: prompt {i} differs"
    summary = report.results["strategy"]
    assert 1 <= summary["mean_k"] < K, f"K never varied: {summary['mean_k']}"
    if extra.get("tree") == "dynamic":
        assert summary["nodes_per_step"] == extra["num_nodes"]  # the verify shape did not change
    hist = summary["accepted_histogram"]
    assert len(hist) == K + 1 and sum(hist) == summary["drafts"]
    assert sum(n * c for n, c in enumerate(hist)) == summary["accepted_tokens"]


# --- b) a self-draft accepts all it drafts -----------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("strategy, extra", [v for v in VARIANTS if _strategy_class(v.values[0]).needs_draft_model
                                             and "tree" not in v.values[1]])
def test_a_self_draft_accepts_every_token_it_drafts(strategy, extra, temperature, tmp_path):
    report = _run(strategy, "tiny-qwen3", tmp_path, "draft=self", "engine.batch_size=4", *_settings({"k": K, **extra}),
                  f"sampling.temperature={temperature}")
    summary = report.results["strategy"]
    assert summary["acceptance_length"] == pytest.approx(1 + summary["mean_k"], abs=1e-12), summary
    assert summary["accepted_histogram"][0] == 0
    if extra.get("k_schedule") == "heuristic":
        assert summary["mean_k"] == K  # every step accepted everything: K stays at its cap k
    else:
        assert 1 <= summary["mean_k"] < K


# --- c) T > 0: the target's distribution -------------------------------------------------------------

N = 6000
TOKENS = 3
# the sharp target's draft probabilities are larger (peaked at T = 0.5), and all N rows must be unsure at once: a
# threshold per drafter that cuts some steps and not others (measured mean K 1.45-1.99); others get 0.5 untuned
SHARP_THRESHOLD = {"draft_model": 0.6, "eagle": 0.6, "layer_skip": 0.45, "medusa": 0.05}
SHARP = {**SCHEDULES, "by_batch": {"k_by_batch_size": {1: 3, N: 1}},  # K = 1 while all N rows are active, 3 after
         "dynamic_confidence": {**SCHEDULES["dynamic_confidence"], "confidence_threshold": 0.1}}  # depth 2, not 3


def _samples(strategy: str, extra: dict) -> bool:
    """Whether the variant drafts by sampling from its q (a dynamic tree's nodes are one-hot picks; its rule's power:
    tests/test_verify_tree.py), as in the conformance suite."""
    return _strategy_class(strategy).samples and "tree" not in extra


def _sharp(strategy: str, extra: dict) -> dict:
    name = next(name for name, e in SCHEDULES.items() if e == extra)
    if name == "confidence":  # (a chain)
        return {**extra, "confidence_threshold": SHARP_THRESHOLD.get(strategy, 0.5)}
    return SHARP[name]


def _sample(strategy: str, target, extra: dict, rule=None) -> tuple[np.ndarray, float, float]:
    """N rows of PROMPT through the strategy (registry config + extra): tokens [N, TOKENS], acceptance rate per
    drafted token, mean K drafted."""
    options = {**OmegaConf.to_container(_compose("target=tiny-llama", f"strategy={strategy}").strategy, resolve=True),
               "k": K, **extra}
    cls = get_class(options.pop("_target_"))
    draft = perturbed(target, 0.3) if cls.needs_draft_model else None
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=SAMPLING, device=CPU)
    engine = Engine(ctx.target_runner, cls(ctx, **options), Verifier(SAMPLING, CPU, rule=rule), max_new_tokens=TOKENS,
                    eos_ids=set(), device=CPU)
    rows, _ = engine.generate([PROMPT] * N)
    drafts, k_drafted = sum(r.drafts for r in rows), sum(r.k_drafted for r in rows)
    return np.array([r.output_ids for r in rows]), sum(r.accepted_tokens for r in rows) / k_drafted, k_drafted / drafts


@pytest.mark.parametrize("strategy, extra", VARIANTS)
def test_sampled_tokens_follow_the_target_distribution_whatever_k(strategy, extra, sharp_target):
    target, marginals = sharp_target
    out, acceptance, mean_k = _sample(strategy, target, _sharp(strategy, extra))
    assert min(_pvalues(out, marginals)) > 1e-4
    if extra.get("k_schedule") != "confidence" or strategy in SHARP_THRESHOLD:
        assert 1 <= mean_k < K, f"K never varied: {mean_k}"
    if _samples(strategy, extra):
        assert 0.01 < acceptance < 0.99


@pytest.mark.parametrize("strategy, extra", [v for v in VARIANTS if _samples(*v.values)])
def test_the_distribution_test_fails_under_a_wrong_rule_whatever_k(strategy, extra, sharp_target):
    target, marginals = sharp_target
    out, _, _ = _sample(strategy, target, _sharp(strategy, extra), rule=resample_from_p)
    assert min(_pvalues(out, marginals)[1:]) < 1e-6


# --- the settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy, settings, fragment", [
    ("draft_model", {"k_schedule": "sometimes"}, "k_schedule='sometimes'"),
    ("draft_model", {"k_schedule": "confidence", "confidence_threshold": 1.0}, "confidence_threshold=1.0"),
    ("eagle", {"k_schedule": "confidence", "confidence_threshold": 0}, "strictly between 0 and 1"),
    ("medusa", {"k_schedule": "confidence", "confidence_threshold": "high"}, "confidence_threshold='high'"),
    ("ngram", {"k_schedule": "confidence"}, "lookup draft has no probability"),
    ("draft_model", {"k_by_batch_size": {1: 4}}, "values 1..k"),
    ("layer_skip", {"k_by_batch_size": {0: 2}}, "keys >= 1"),
    ("draft_model", {"k_by_batch_size": {}}, "k_by_batch_size={}"),
    ("draft_model", {"k_by_batch_size": [1, 2]}, "mapping"),
    ("draft_model", {"k_schedule": "heuristic", "tree": "topk", "top_k": 2}, "tree=chain only"),
    ("eagle", {"k_by_batch_size": {1: 2}, "tree": "dynamic", "top_k": 2, "num_nodes": 4}, "tree=chain only"),
    ("medusa", {"k_schedule": "confidence", "tree": "static"}, "a topk or static tree has a fixed shape"),
])
def test_bad_schedule_settings_are_config_errors(strategy, settings, fragment):
    cfg = {**OmegaConf.to_container(_compose(f"strategy={strategy}").strategy, resolve=True), **settings}
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        _strategy_class(strategy).validate(cfg)


def test_the_registry_yamls_hold_the_schedule_settings_and_pass_validation():
    configs = {s: OmegaConf.to_container(_compose(f"strategy={s}").strategy, resolve=True) for s in available_strategies()}
    for strategy, cfg in configs.items():  # every yaml, the ones added later included
        _strategy_class(strategy).validate(cfg)
        if cfg.get("tree", "chain") != "chain":  # a preset drafting a tree (eagle_tree): a confidence stop at most
            assert cfg["k_by_batch_size"] is None and cfg["tree"] in ("dynamic", "auto") and cfg["k_schedule"] in ("fixed", "confidence")
            continue
        if cfg["k_schedule"] != "fixed":  # a preset of a chain with a schedule of its own (eagle_adaptive): its base
            # yaml, the same class at a fixed k, is in the registry too
            assert any(other.get("_target_") == cfg.get("_target_") and other.get("k_schedule") == "fixed"
                       and other.get("tree", "chain") == "chain" for other in configs.values())
            assert cfg["k_by_batch_size"] is None
            continue
        assert (cfg["k_schedule"], cfg["k_by_batch_size"], cfg["confidence_threshold"]) == ("fixed", None, 0.4)
        _strategy_class(strategy).validate(cfg | {"k_schedule": "heuristic", "k_by_batch_size": {1: K, 16: 1}})


# --- the rules on their own ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def target():
    return tiny("tiny-llama")


def _proposer(target, **settings) -> DraftModelProposer:
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=perturbed(target, 0.3),
                       sampling=SamplingParams(), device=CPU)
    return DraftModelProposer(ctx, k=5, **settings)


def _state(b: int, active: list[bool]) -> DecodeState:
    return DecodeState(tokens=torch.zeros((b, 8), dtype=torch.long), lengths=torch.ones(b, dtype=torch.long),
                       lengths_host=[1] * b, prompt_lengths=[1] * b, active=torch.tensor(active), max_len=8,
                       active_host=active)


def test_k_by_batch_size_takes_the_largest_key_at_most_the_active_rows(target):
    p = _proposer(target, k_by_batch_size={2: 4, 5: 1, 3: 2})
    got = [p.step_limit(_state(7, [True] * n + [False] * (7 - n))) for n in range(1, 8)]
    assert got == [5, 4, 2, 2, 1, 1, 1]  # 1 row: no key <= 1, so k


def test_heuristic_adds_two_after_a_full_step_and_drops_one_otherwise(target):
    p = _proposer(target, k_schedule="heuristic", k_by_batch_size={1: 4})
    active = [True, False, True]  # the finished middle row's count is ignored
    p.k_now = p.step_k = 2
    p.schedule_next([2, 0, 2], active)
    assert p.k_now == 4
    p.step_k = 4
    p.schedule_next([4, 0, 4], active)
    assert p.k_now == 5  # never over k (5) ...
    assert p.step_limit(_state(3, active)) == 4  # ... and capped by k_by_batch_size for the step
    p.step_k = 4
    p.schedule_next([4, 4, 3], active)  # one active row rejected one of the 4 it was given
    assert p.k_now == 4
    for _ in range(4):
        p.step_k = p.k_now
        p.schedule_next([0, 0, 0], active)
    assert p.k_now == 1  # never under 1


def test_confidence_stops_the_chain_only_when_every_active_row_is_unsure(target):
    """Drafts at a threshold between the rows' confidences: a step stops only where all active rows fall under it;
    a row that finished never keeps the batch drafting."""
    p = _proposer(target, k_schedule="confidence", confidence_threshold=0.5)
    logits = torch.tensor([[[0.0, 5.0, 0.0]], [[0.0, 0.0, 0.1]]])  # [B=2, 1, V=3]: row 0 sure, row 1 unsure
    d = logits.argmax(-1)
    assert not p._unsure(logits, d, None, torch.tensor([True, True]))
    assert p._unsure(logits, d, None, torch.tensor([False, True]))
    q = torch.tensor([[[0.2, 0.3, 0.5]], [[0.1, 0.1, 0.8]]])
    assert p._unsure(logits, torch.tensor([[1], [1]]), q, torch.tensor([True, True]))  # q of the sampled token, not the max


def test_adaptive_steps_verify_fewer_columns_and_warm_every_width_under_graphs(target):
    """The engine verifies K_step + 1 columns, and with a graphed target first runs each width 2..k+1 once at the
    scratch slot (so the untimed warm-up captures every graph the timed run replays), leaving the output exact."""
    ctx = BuildContext(target=target, target_runner=GraphedRunner(make_runner(target.model), capture=False),
                       draft=perturbed(target, 0.3), sampling=SamplingParams(), device=CPU, cuda_graphs=True)
    proposer = DraftModelProposer(ctx, k=3, k_schedule="heuristic")
    widths: list[int] = []
    inner = ctx.target_runner.forward
    ctx.target_runner.forward = lambda tokens, *a, **kw: (widths.append(tokens.shape[1]), inner(tokens, *a, **kw))[1]
    engine = Engine(ctx.target_runner, proposer, Verifier(ctx.sampling, CPU), max_new_tokens=10, eos_ids=set(), device=CPU)
    prompts = ragged_prompts(101, (5, 9, 3))
    rows, _ = engine.generate(prompts)
    assert widths[:3] == [2, 3, 4]  # before the prefill (and the clock): the warm-up of every width
    assert set(widths[4:]) <= {2, 3, 4} and len(set(widths[4:])) > 1  # after the prefill (widths[3]): K varied
    plain = Engine(make_runner(target.model), DraftModelProposer(ctx, k=3), Verifier(ctx.sampling, CPU),
                   max_new_tokens=10, eos_ids=set(), device=CPU).generate(prompts)[0]
    assert [r.output_ids for r in rows] == [r.output_ids for r in plain]
    for r in rows:
        assert sum(r.accepted_histogram) == r.drafts and r.k_drafted < 3 * r.drafts
