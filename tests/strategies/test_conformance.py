"""The conformance suite: every registered strategy keeps DESIGN.md's losslessness contract.

The registry is the strategy config group (`specbench.run.available_strategies()`, each yaml's `_target_`
names a Proposer subclass); a new strategy (one .py + one yaml) is covered here without editing this file.
What a strategy is checked for follows from its class flags, never from its name:

a) every strategy: T = 0 output through the real path (`run(cfg)`, composed with Hydra) equals plain greedy
   decoding with transformers' own forward (full recompute, no cache; fp32), at batch 1 and at batch 4 of
   ragged prompt lengths, on two tiny random-weight targets;
b) `needs_draft_model`: the target drafting for itself (`draft=self`) accepts everything, AL = K + 1, at
   T = 0 and T = 1;
c) every strategy at T > 0: the first generated tokens follow the target's exact marginals (chi-square);
   `samples` (it returns q at T > 0): its drafts are partly accepted, and the same test fails under a wrong
   acceptance rule (`specbench_testing.resample_from_p`), so it has the power to see a wrong q.

Run time: ~20 s on one CPU thread.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

from specbench_testing import chisquare_pvalue, cut_at_commonest_token, perturbed, resample_from_p, tiny, tree_resample_from_p
from specbench.engine import Engine
from specbench.models.loading import LoadedModel
from specbench.models.runner import make_runner
from specbench.run import CONF_DIR, Report, available_strategies, run
from specbench.errors import ConfigError
from specbench.strategies.base import BuildContext, Proposer
from specbench.verify import SamplingParams, Verifier, logits_to_probs

CPU = torch.device("cpu")
STRATEGIES = available_strategies()
# tiny random-weight targets (our decoder's llama and qwen3 paths), each with the draft a `needs_draft_model`
# strategy gets in (a): the other one. Same init seed, so the same weights, but qwen3 adds qk-norm: they agree
# often, not always (AL ~2 at k=3), so partial acceptance and the draft's rollback happen (draft=self is (b)).
TARGETS = {"tiny-llama": "tiny-qwen3", "tiny-qwen3": "tiny-llama"}
MAX_NEW = 12
# the reference's top-2 logit margin must exceed this, so that fp32 noise cannot decide a token: our decoder's
# logits differ from transformers' by <= 1.5e-7 on these prompts (1 or 2 threads); the smallest margin met
# is 4.6e-5 (tiny-qwen3, builtin prompt 4; other init seeds or prompts meet margins down to 4e-7)
TIE = 1e-5


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@cache
def _strategy_class(name: str) -> type[Proposer]:
    return get_class(_compose(f"strategy={name}").strategy._target_)


def _accepts(name: str, settings: dict) -> bool:
    """Whether strategy `name`'s yaml with `settings` on top passes its class's validation (a yaml that is a preset of
    another, e.g. eagle_tree's confidence stop, refuses some variants that its class takes in other settings)."""
    cfg = OmegaConf.to_container(_compose(f"strategy={name}").strategy, resolve=True) | settings
    try:
        _strategy_class(name).validate(cfg)
    except ConfigError:
        return False
    return True


# every strategy as registered, and each tree mode a strategy accepts
TREES = [{"tree": "topk", "top_k": 2}, {"tree": "static"}, {"tree": "dynamic", "top_k": 2, "num_nodes": 5}]
VARIANTS = [pytest.param(s, {}, id=s) for s in STRATEGIES] + [
    pytest.param(s, t, id=f"{s}[tree={t['tree']}]") for t in TREES for s in STRATEGIES if _accepts(s, t)]


def _settings(extra: dict) -> list[str]:
    return [f"++strategy.{key}={value}" for key, value in extra.items()]


def _run(strategy: str, target: str, out: Path, *overrides: str) -> Report:
    """The real path: run(cfg) with a composed config, CPU fp32, strategy only (no baseline)."""
    return run(_compose(f"target={target}", f"strategy={strategy}", "dataset=builtin",
                        "dataset.num_prompts=5", f"max_new_tokens={MAX_NEW}", "logger=none", "baseline=false",
                        "engine.device=cpu", "engine.dtype=float32", f"+output_dir={out}", *overrides))


# --- a) T = 0: token for token the target's own greedy decoding --------------------------------------


@cache
def _reference_model(target: str) -> LoadedModel:
    return tiny(target, seed=int(_compose(f"target={target}").target.init_seed))


@cache
def _plain_greedy(target: str, prompt: tuple[int, ...], max_new: int) -> tuple[list[int], float]:
    """transformers' forward over the whole sequence at every step (no cache): the output and the smallest
    top-2 logit margin met on the way (a near-tie would make fp32 noise decide the token)."""
    model = _reference_model(target).model
    ids, margin = list(prompt), float("inf")
    with torch.no_grad():
        for _ in range(max_new):
            top2 = model(torch.tensor([ids]), use_cache=False).logits[0, -1].topk(2)
            margin = min(margin, float(top2.values[0] - top2.values[1]))
            ids.append(int(top2.indices[0]))
    return ids[len(prompt):], margin


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("strategy, extra", VARIANTS)
def test_greedy_output_equals_plain_greedy_decoding(strategy, extra, target, batch_size, tmp_path):
    needs_draft = _strategy_class(strategy).needs_draft_model
    report = _run(strategy, target, tmp_path, f"engine.batch_size={batch_size}", *_settings(extra),
                  *([f"draft={TARGETS[target]}"] if needs_draft else []))
    prompts = [tuple(o["prompt_token_ids"]) for o in report.outputs]
    assert len({len(p) for p in prompts[:4]}) == 4, "the batch of 4 should mix prompt lengths"
    for i, (prompt, o) in enumerate(zip(prompts, report.outputs)):
        expected, margin = _plain_greedy(target, prompt, MAX_NEW)
        assert margin > TIE, f"prompt {i}: the reference meets a near-tie (top-2 logit margin {margin:.1e}); pick other prompts"
        assert o["output_token_ids"] == expected, f"{strategy} on {target}, batch {batch_size}: prompt {i} differs"
    if needs_draft:
        k, al = report.results["run"]["k"], report.results["strategy"]["acceptance_length"]
        assert 1 < al < k + 1, f"the draft {TARGETS[target]} should be accepted partly (AL {al}, k {k})"


@pytest.mark.parametrize("strategy, extra", VARIANTS)
def test_continuous_batching_output_equals_plain_greedy_decoding(strategy, extra, tmp_path):
    """engine.scheduler=continuous: 5 prompts through 2 slots, rows ending at a stop token at different steps, so a
    finished row's slot takes the next prompt while the other row decodes: each output is the reference cut at its
    first stop token, and each prompt's drafts are accepted as in static batch-1 decoding (the draft's state, its
    cache or lookup tables, follows the slot)."""
    target = "tiny-qwen3"
    prompts = [tuple(o["prompt_token_ids"]) for o in _run("none", target, tmp_path / "ids").outputs]
    reference = [_plain_greedy(target, p, MAX_NEW)[0] for p in prompts]
    # a stop token that ends some references early and others not at all: rows finish at different steps
    stop, expected = cut_at_commonest_token(reference)
    assert len({len(e) for e in expected}) > 1, "the stop token should end the prompts at different lengths"
    needs_draft = _strategy_class(strategy).needs_draft_model
    settings = [f"engine.stop_token_ids=[{stop}]", *_settings(extra),
                *([f"draft={TARGETS[target]}"] if needs_draft else [])]
    report = _run(strategy, target, tmp_path / "cb", "engine.batch_size=2", "engine.scheduler=continuous", *settings)
    assert [o["output_token_ids"] for o in report.outputs] == expected
    assert report.results["run"]["scheduler"] == "continuous"
    if _strategy_class(strategy).reads_other_requests:  # its acceptance depends on the order requests finish
        return
    alone = _run(strategy, target, tmp_path / "b1", "engine.batch_size=1", *settings)
    accepted = lambda r: [(o["metrics"]["drafts"], o["metrics"]["accepted_tokens"]) for o in r.outputs]  # noqa: E731
    assert accepted(report) == accepted(alone)


# --- b) a self-draft accepts everything -------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("strategy, extra", [v for v in VARIANTS if _strategy_class(v.values[0]).needs_draft_model])
def test_a_self_draft_accepts_every_token(strategy, extra, temperature, tmp_path):
    target = "tiny-qwen3"
    report = _run(strategy, target, tmp_path, "draft=self", "engine.batch_size=4",
                  *_settings(_self_draft_tree(extra, temperature)), f"sampling.temperature={temperature}")
    _assert_self_draft(report, target, temperature)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("strategy, extra", [v for v in VARIANTS if _strategy_class(v.values[0]).needs_draft_model])
def test_a_self_draft_accepts_every_token_under_continuous_batching(strategy, extra, temperature, tmp_path):
    """The draft's cache rows follow their slots: 5 prompts over 2 slots, rows ending at different steps (stop
    tokens: at T = 0 the commonest of target-only decoding's outputs; at T = 1 every 7th id of the 101), a
    self-draft still accepts everything."""
    target = "tiny-qwen3"
    settings = _settings(_self_draft_tree(extra, temperature))
    stops = list(range(0, 101, 7))
    if temperature == 0:
        outputs = [o["output_token_ids"] for o in _run("none", target, tmp_path / "ids").outputs]
        stops = [cut_at_commonest_token(outputs)[0]]
    report = _run(strategy, target, tmp_path / "cb", "draft=self", "engine.batch_size=2", "engine.scheduler=continuous",
                  f"engine.stop_token_ids={stops}", *settings, f"sampling.temperature={temperature}")
    assert len({len(o["output_token_ids"]) for o in report.outputs}) > 1, "rows should end at different steps"
    _assert_self_draft(report, target, temperature, set(stops))


def _self_draft_tree(extra: dict, temperature: float) -> dict:
    """A static tree's nodes are deterministic picks (one-hot drafts): a self-draft's are all accepted only at T = 0,
    and then its top-1 path is the greedy chain. A dynamic tree is drafted from q at T > 0 (trees.expand_dynamic_sampled),
    so a self-draft's first child is always accepted: one wide, it is a chain drafted whole at any temperature."""
    if extra.get("tree") == "static" and temperature > 0:
        pytest.skip("a static tree drafts one-hot picks: at T > 0 the target may reject its own argmax")
    if extra.get("tree") == "dynamic":
        return {**extra, "top_k": 1, "num_nodes": 3}
    return extra


def _assert_self_draft(report: Report, target: str, temperature: float, stops: set[int] = frozenset()) -> None:
    k, summary = report.results["run"]["k"], report.results["strategy"]
    assert k >= 1 and summary["acceptance_length"] == k + 1, summary
    assert all(o["metrics"]["acceptance_length"] == k + 1 for o in report.outputs if o["metrics"]["drafts"])
    if temperature == 0:
        expected = [_plain_greedy(target, tuple(o["prompt_token_ids"]), MAX_NEW)[0] for o in report.outputs]
        expected = [ref[: next((i + 1 for i, t in enumerate(ref) if t in stops), len(ref))] for ref in expected]
        assert [o["output_token_ids"] for o in report.outputs] == expected


# --- c) T > 0: the emitted tokens follow the target's distribution -------------------------------------

# T far from 1, and truncation: a strategy that samples at T but reports q at T = 1 fails the chi-square with
# p < 1e-40 (checked with such a mutant of draft_model); the wrong rule gives p < 1e-10 for draft_model, eagle
# and layer_skip, the right one p > 0.05. Logits scaled by 5 (below) at T = 0.5: the target's max p is ~0.1
SAMPLING = SamplingParams(temperature=0.5, top_k=50, top_p=0.95, seed=1)
PROMPT = [5, 17, 42, 3, 88, 9]
N = 6000  # rows of the same prompt, decoded as one batch
TOKENS = 3  # generated tokens checked: the prefill's, then the first speculative step's d_1 and d_2 (or corrections)


def _exact_marginals(model: LoadedModel, prompt: list[int], params: SamplingParams) -> list[np.ndarray]:
    """The target's exact marginals of generated tokens 1..3, from transformers' forward over all V^2 continuations."""
    v, n = model.vocab_size, len(prompt)
    x1, x2 = torch.arange(v).repeat_interleave(v), torch.arange(v).repeat(v)
    seqs = torch.cat([torch.tensor(prompt).expand(v * v, n), x1[:, None], x2[:, None]], dim=1)  # [V*V, P+2]
    with torch.no_grad():
        logits = model.model(seqs, use_cache=False).logits  # [V*V, P+2, V]
    p1 = logits_to_probs(logits[0, n - 1], params).double()  # [V]
    p2 = logits_to_probs(logits[::v, n], params).double()  # [x1, V]
    p3 = logits_to_probs(logits[:, n + 1], params).double().view(v, v, v)  # [x1, x2, V]
    return [p1.numpy(), (p1 @ p2).numpy(), torch.einsum("a,ab,abc->c", p1, p2, p3).numpy()]


@pytest.fixture(scope="module")
def sharp_target() -> tuple[LoadedModel, list[np.ndarray]]:
    """tiny-llama with its LM head scaled by 5, and its exact marginals. Random init gives near-uniform logits
    (max p ~0.014), where p ~ q and a wrong rule is invisible; scaled, the target and every draft that
    shares or copies its LM head are peaked and distinct."""
    model = tiny("tiny-llama")
    with torch.no_grad():
        model.model.lm_head.weight.mul_(5.0)
    return model, _exact_marginals(model, PROMPT, SAMPLING)


def _sample(strategy: str, target: LoadedModel, extra: dict, rule=None, tree_rule=None) -> tuple[np.ndarray, float]:
    """N rows of PROMPT through the strategy built from its registry config (the class from `_target_`, the
    Engine and a Verifier with `rule`): the generated tokens [N, TOKENS] and the acceptance rate per drafted depth. A strategy
    that needs a draft model gets a perturbed copy of the target (about half its drafts are accepted)."""
    options = {**OmegaConf.to_container(_compose("target=tiny-llama", f"strategy={strategy}").strategy, resolve=True),
               **extra}
    cls = get_class(options.pop("_target_"))
    draft = perturbed(target, 0.3) if cls.needs_draft_model else None
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=SAMPLING, device=CPU)
    engine = Engine(ctx.target_runner, cls(ctx, **options), Verifier(SAMPLING, CPU, rule=rule, tree_rule=tree_rule), max_new_tokens=TOKENS,
                    eos_ids=set(), device=CPU)
    rows, _ = engine.generate([PROMPT] * N)
    depths = sum(r.drafts for r in rows) * engine.proposer.k  # a tree's accepted path is at most K deep, like a chain
    return np.array([r.output_ids for r in rows]), sum(r.accepted_tokens for r in rows) / max(depths, 1)


def _samples(strategy: str, extra: dict) -> bool:
    """Whether the variant drafts by sampling from its q at T > 0: a `samples` strategy, in a chain or a dynamic tree
    (drawn from q: trees.expand_dynamic_sampled), not in a static tree, whose nodes are one-hot picks (the tree rule's
    power against one-hot siblings: tests/test_verify_tree.py)."""
    tree = extra.get("tree", _compose(f"strategy={strategy}").strategy.get("tree"))  # a preset may draft a tree
    return _strategy_class(strategy).samples and tree != "static"


def _pvalues(out: np.ndarray, marginals: list[np.ndarray]) -> list[float]:
    return [chisquare_pvalue(np.bincount(out[:, i], minlength=len(m)), m) for i, m in enumerate(marginals)]


@pytest.mark.parametrize("strategy, extra", VARIANTS)
def test_sampled_tokens_follow_the_target_distribution(strategy, extra, sharp_target):
    """Every strategy at T > 0 (a strategy without q is verified as one-hot); the samplers must also draft
    something the target partly accepts, or the wrong-rule check below could not see their q."""
    target, marginals = sharp_target
    out, acceptance = _sample(strategy, target, extra)
    pvalues = _pvalues(out, marginals)
    assert min(pvalues) > 1e-4, pvalues
    if _samples(strategy, extra):
        assert 0.01 < acceptance < 0.99, f"acceptance rate {acceptance:.3f}: acceptance and rejection should both happen"


@pytest.mark.parametrize("strategy, extra", [v for v in VARIANTS if _samples(*v.values)])
def test_the_distribution_test_fails_under_a_wrong_acceptance_rule(strategy, extra, sharp_target):
    target, marginals = sharp_target
    out, _ = _sample(strategy, target, extra, rule=resample_from_p, tree_rule=tree_resample_from_p)
    pvalues = _pvalues(out, marginals)
    assert min(pvalues[1:]) < 1e-6, f"no power: the wrong rule passes ({pvalues})"  # token 1 never sees a draft
