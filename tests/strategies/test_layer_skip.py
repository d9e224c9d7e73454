"""layer_skip (self-speculation): draft depth, its own cache and rollback, and losslessness.

Losslessness is checked at T = 0 against transformers' greedy generate, and at T > 0 with a
chi-square test of the first three generated tokens against the target's exact marginals, plus a
mutation check that the same test fails when the correction is drawn from p instead of the residual.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specbench_testing import chisquare_pvalue, hf_greedy, ragged_prompts, resample_from_p, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.decoder import DecoderRunner
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.layer_skip import LayerSkipProposer, resolve_num_layers
from specbench.verify import SamplingParams, Verifier, logits_to_probs

CPU = torch.device("cpu")
V = 101  # the tiny presets' vocabulary


def _ctx(model, sp: SamplingParams = SamplingParams(), backend: str = "auto") -> BuildContext:
    return BuildContext(target=model, target_runner=make_runner(model.model, backend), draft=None, sampling=sp,
                        device=CPU, backend=backend)


def _engine(ctx: BuildContext, proposer, max_new_tokens: int, rule=None) -> Engine:
    return Engine(ctx.target_runner, proposer, Verifier(ctx.sampling, CPU, rule=rule), max_new_tokens=max_new_tokens,
                  eos_ids=set(), device=CPU)


# --- depth and settings ------------------------------------------------------------------------


def test_num_layers_resolution_and_errors():
    assert resolve_num_layers(None, 30) == 15
    assert resolve_num_layers(None, 2) == 1
    assert resolve_num_layers(29, 30) == 29
    for bad in (30, 31, 0, -1):
        with pytest.raises(ConfigError) as e:
            resolve_num_layers(bad, 30)
        assert f"num_layers={bad}" in str(e.value) and "1..29" in str(e.value) and "30 layers" in str(e.value)
    with pytest.raises(ConfigError, match="at least 2 layers"):
        resolve_num_layers(None, 1)


@pytest.mark.parametrize("bad", [0, -2, "4", 2.5, True])
def test_validate_refuses_non_positive_integers_before_loading(bad):
    with pytest.raises(ConfigError, match="num_layers"):
        LayerSkipProposer.validate({"name": "layer_skip", "k": 3, "num_layers": bad})
    LayerSkipProposer.validate({"name": "layer_skip", "k": 3, "num_layers": None})


def test_build_time_checks_on_the_target():
    t = tiny("tiny-llama")  # 2 layers
    with pytest.raises(ConfigError, match=r"num_layers=2 .*1\.\.1"):
        LayerSkipProposer(_ctx(t), k=3, num_layers=2)
    with pytest.raises(ConfigError, match="engine.backend='transformers'"):
        LayerSkipProposer(_ctx(t, backend="transformers"), k=3)
    assert LayerSkipProposer(_ctx(t), k=3).num_layers == 1  # null = half
    from omegaconf import OmegaConf

    from specbench.run import CONF_DIR

    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "strategy" / "layer_skip.yaml"))
    assert cfg == {"_target_": "specbench.strategies.layer_skip.LayerSkipProposer", "name": "layer_skip", "k": 3,
                   "num_layers": None, "one_extra_forward_pass": False, "drop_first_drafted_tokens": False,
                   "tree": "chain", "top_k": 1, "num_nodes": 0, "tree_choices": None, "k_schedule": "fixed",
                   "confidence_threshold": 0.4, "k_by_batch_size": None}


def test_draft_shares_weights_and_owns_a_shallow_cache():
    t = tiny("tiny-qwen3")
    ctx = _ctx(t, SamplingParams(temperature=1.0))
    proposer = LayerSkipProposer(ctx, k=4, num_layers=1)
    runner = proposer.runner
    assert runner.num_layers == 1 and runner.layers[0] is t.model.model.layers[0]
    assert runner.embed is t.model.model.embed_tokens and runner.lm_head is t.model.lm_head and runner.norm is t.model.model.norm
    engine = _engine(ctx, proposer, max_new_tokens=3)
    prompts = [[5, 6, 7], [1, 2, 3, 4, 5, 6, 7], [9, 9]]  # B=3, ragged
    engine.generate(prompts)
    cfg = t.model.config
    max_len = engine.cache_len(7)
    assert runner.k_cache.shape == (1, 3, cfg.num_key_value_heads, max_len, cfg.head_dim)
    assert ctx.target_runner.k_cache.shape[0] == 2  # the target's own, deeper cache is separate
    assert runner.k_cache.data_ptr() != ctx.target_runner.k_cache.data_ptr()


# --- the cache across steps: catch-up and rollback ---------------------------------------------


class _Checked(LayerSkipProposer):
    """Checks every step's q against a fresh L-layer forward over each row's committed tokens (+ drafts)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps = 0
        self.accepted: list[list[int]] = []

    def propose(self, state):
        draft = super().propose(state)
        self.active = state.active.tolist()
        fresh = DecoderRunner(self.runner.hf_model, self.num_layers)
        for b, length in enumerate(state.lengths_host):
            if not bool(state.active[b]):
                continue
            seq = torch.cat([state.tokens[b, :length], draft.tokens[b, :-1]])  # committed + d_1..d_{K-1}
            fresh.allocate(1, len(seq))
            logits = fresh(seq[None], torch.arange(len(seq))[None]).logits[0, length - 1 :]  # [K, V]
            want = logits_to_probs(logits, self.sampling)
            torch.testing.assert_close(draft.probs[b], want, atol=1e-5, rtol=1e-4)
        self.steps += 1
        return draft

    def commit(self, state, verdict, accepted, old_lengths):
        self.accepted.append([n for n, a in zip(accepted, self.active) if a])
        super().commit(state, verdict, accepted, old_lengths)


def test_cache_stays_exact_after_partial_and_full_acceptance():
    t = tiny("tiny-llama")
    _sharpen(t)
    ctx = _ctx(t, SamplingParams(temperature=1.0, seed=5))
    k = 3
    proposer = _Checked(ctx, k=k, num_layers=1)
    prompts = [[5, 6, 7, 8, 9], [1, 2], [40, 41, 42, 43, 44, 45, 46, 47], [3, 1, 4]]
    _engine(ctx, proposer, max_new_tokens=14).generate(prompts)
    seen = {n for step in proposer.accepted for n in step}
    assert {0, k} <= seen and seen & set(range(1, k)), seen  # rejection, partial and full acceptance all happened


# --- losslessness at T = 0 ---------------------------------------------------------------------

NEW_TOKENS = 20


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def greedy_case(request):
    """A tiny random target, prompts of different lengths and transformers' own greedy outputs."""
    t = tiny(request.param)
    prompts = ragged_prompts(V)
    return t, prompts, hf_greedy(t.model, prompts, NEW_TOKENS)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_equals_transformers_generate(greedy_case, batch_size, k):
    t, prompts, want = greedy_case
    ctx = _ctx(t)
    engine = _engine(ctx, LayerSkipProposer(ctx, k=k, num_layers=1), max_new_tokens=NEW_TOKENS)  # all but one layer
    rows = []
    for s in range(0, len(prompts), batch_size):
        rows += engine.generate(prompts[s : s + batch_size])[0]
    assert [r.output_ids for r in rows] == want
    accepted_at = np.sum([r.accepted_at for r in rows], axis=0)
    assert accepted_at[0] > 0  # the self-draft is accepted ...
    if k > 1:
        assert accepted_at[-1] < accepted_at[0]  # ... and partly rejected: the rollback path ran


# --- losslessness at T > 0: chi-square against the exact marginals -----------------------------

N_SAMPLES = 2000
PROMPT = [5, 17, 42, 3, 88, 9]


def _sharpen(model) -> None:
    """Random init gives near-uniform logits (max p ~ 0.014), where p ~ q and a wrong rule is invisible.

    Scaling the LM head makes both the target and the 1-layer draft peaked and distinct (target's
    max p ~ 0.35, AL ~ 1.9 at K=2), so that the test has power: the mutant below fails with p < 1e-10.
    """
    with torch.no_grad():
        model.model.lm_head.weight.mul_(30.0)


def _exact_marginals(model, sp: SamplingParams) -> list[np.ndarray]:
    """Target marginals of generated tokens 1, 2, 3: one forward over all V^2 continuations x1 x2."""
    p = len(PROMPT)
    runner = DecoderRunner(model.model)
    runner.allocate(V * V, p + 2)
    x1, x2 = torch.arange(V).repeat_interleave(V), torch.arange(V).repeat(V)
    seqs = torch.cat([torch.tensor(PROMPT).expand(V * V, p), x1[:, None], x2[:, None]], dim=1)  # [V*V, P+2]
    logits = runner(seqs, torch.arange(p + 2).expand(V * V, p + 2)).logits  # [V*V, P+2, V]
    p1 = logits_to_probs(logits[0, p - 1], sp).double()  # [V]
    p2 = logits_to_probs(logits[::V, p], sp).double()  # [V(x1), V]
    p3 = logits_to_probs(logits[:, p + 1], sp).double().view(V, V, V)  # [x1, x2, V]
    return [p1.numpy(), (p1 @ p2).numpy(), torch.einsum("a,ab,abc->c", p1, p2, p3).numpy()]


def _sample_pvalues(sp: SamplingParams, rule=None) -> list[float]:
    t = tiny("tiny-llama")
    _sharpen(t)
    ctx = _ctx(t, sp)
    engine = _engine(ctx, LayerSkipProposer(ctx, k=2, num_layers=1), max_new_tokens=3, rule=rule)
    rows, _ = engine.generate([PROMPT] * N_SAMPLES)  # N identical rows
    out = np.array([r.output_ids for r in rows])  # [N, 3]
    return [chisquare_pvalue(np.bincount(out[:, i], minlength=V), m) for i, m in enumerate(_exact_marginals(t, sp))]


SAMPLING = [SamplingParams(temperature=1.0, seed=3), SamplingParams(temperature=1.0, top_k=20, top_p=0.9, seed=4)]
ALPHA = 1e-4  # per test; the runs are seeded, so a pass is reproducible


@pytest.mark.parametrize("sp", SAMPLING, ids=["T1", "T1-topk20-topp0.9"])
def test_sampling_keeps_the_target_distribution(sp):
    pvalues = _sample_pvalues(sp)
    assert min(pvalues) > ALPHA, pvalues


@pytest.mark.parametrize("sp", SAMPLING, ids=["T1", "T1-topk20-topp0.9"])
def test_the_same_test_fails_on_a_wrong_correction_rule(sp):
    pvalues = _sample_pvalues(sp, rule=resample_from_p)
    assert pvalues[0] > ALPHA  # the first token never sees a draft
    assert min(pvalues[1:]) < ALPHA, pvalues
