"""Tensor parallelism (models/tensor_parallel.py) on the CPU: the split itself, a forward over 2 gloo ranks
against the whole model, and `python -m specbench`'s own rank launch (engine.tensor_parallel=2) end to end.

tiny-qwen3-tp: 6 query heads over 2 KV heads, head_dim 8, intermediate 90 (3 / 1 / 45 per rank at N = 2).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from hydra import compose, initialize_config_dir

from specbench_testing import tiny, tp_forward_logits, tp_forward_worker, tp_hf_plan_worker, tp_shard_on_load_worker
from specbench.errors import ConfigError
from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.models.tensor_parallel import TPGroup, raise_if_unshardable, shard_weights
from specbench.run import CONF_DIR, run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("bias", [False, True])
def test_the_ranks_shares_add_up_to_the_whole_layer(world, bias):
    """Each rank's q/k/v heads and gate/up columns are the whole projection's, in rank order; the ranks' o_proj and
    down_proj outputs (the partial sums the all-reduce adds) sum to the whole one; biases of o/down only on rank 0."""
    hq, hkv, d, h, inter = 12, 6, 4, 10, 18
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    w = dict(qkv_w=rnd((hq + 2 * hkv) * d, h), qkv_b=rnd((hq + 2 * hkv) * d) if bias else None, gu_w=rnd(2 * inter, h),
             gu_b=rnd(2 * inter) if bias else None, qk_w=None, o_w=rnd(h, hq * d), o_b=rnd(h) if bias else None,
             down_w=rnd(h, inter), down_b=rnd(h) if bias else None)
    x = rnd(5, h)
    qkv = torch.nn.functional.linear(x, w["qkv_w"], w["qkv_b"])
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], -1)
    gate, up = torch.nn.functional.linear(x, w["gu_w"], w["gu_b"]).chunk(2, -1)
    shards = [shard_weights(w, hq, hkv, d, TPGroup(r, world)) for r in range(world)]
    local = [torch.nn.functional.linear(x, s["qkv_w"], s["qkv_b"]).split([hq // world * d, hkv // world * d, hkv // world * d], -1)
             for s in shards]
    torch.testing.assert_close(torch.cat([lq for lq, _, _ in local], -1), q)
    torch.testing.assert_close(torch.cat([lk for _, lk, _ in local], -1), k)
    torch.testing.assert_close(torch.cat([lv for _, _, lv in local], -1), v)
    gus = [torch.nn.functional.linear(x, s["gu_w"], s["gu_b"]).chunk(2, -1) for s in shards]
    torch.testing.assert_close(torch.cat([a for a, _ in gus], -1), gate)
    torch.testing.assert_close(torch.cat([b for _, b in gus], -1), up)
    o_in, mlp_in = rnd(5, hq * d), rnd(5, inter)
    o = sum(torch.nn.functional.linear(o_in[:, r * hq // world * d:(r + 1) * hq // world * d], s["o_w"], s["o_b"])
            for r, s in enumerate(shards))
    torch.testing.assert_close(o, torch.nn.functional.linear(o_in, w["o_w"], w["o_b"]))
    down = sum(torch.nn.functional.linear(mlp_in[:, r * inter // world:(r + 1) * inter // world], s["down_w"], s["down_b"])
               for r, s in enumerate(shards))
    torch.testing.assert_close(down, torch.nn.functional.linear(mlp_in, w["down_w"], w["down_b"]))
    assert all((s["o_b"] is None) == (not bias or r > 0) for r, s in enumerate(shards))


def test_a_forward_over_two_gloo_ranks_equals_the_whole_model(tmp_path: Path):
    """Prefill and decode steps of 2 ragged rows over 2 ranks (each its own 3 heads, 1 KV head and cache): the
    logits equal the unsplit decoder's up to fp32 summation order."""
    out = tmp_path / "logits.pt"
    mp.spawn(tp_forward_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    split = torch.load(out)
    whole = tp_forward_logits(DecoderRunner(tiny("tiny-qwen3-tp").model))
    assert len(split) == len(whole) == 4
    for a, b in zip(split, whole):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("scheduler", ["static", "continuous"])
def test_the_cli_starts_its_ranks_and_speculation_equals_target_only_at_tp_2(tmp_path: Path, scheduler: str):
    """engine.tensor_parallel=2 on the CPU: run() starts rank 1 itself (gloo), rank 0 writes the results; the
    draft (the target itself, replicated and unsplit) drafts for the split target, and T=0 output equals target-only
    decoding at the same TP on every prompt. Continuous batching (5 prompts over 2 slots): every rank admits the same
    request into the same row, its prefill narrowed to that row's cache rows on each rank."""
    n = 4 if scheduler == "static" else 5
    report = run(_cfg("target=tiny-qwen3-tp", "strategy=draft_model", "draft=self", "strategy.k=3", "dataset=builtin",
                      f"dataset.num_prompts={n}", "max_new_tokens=10", "engine.batch_size=2", "logger=none",
                      "engine.tensor_parallel=2", f"engine.scheduler={scheduler}", f"+output_dir={tmp_path}"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["run"]["tensor_parallel"] == 2 and results["run"]["scheduler"] == scheduler
    assert results["exact_match"]["all_equal"] and results["exact_match"]["n"] == n
    assert results["strategy"]["acceptance_length"] == 4.0  # a self-draft: the replicated whole target drafts
    assert report.results["exact_match"] == results["exact_match"]


def test_hf_tp_loading_keeps_each_ranks_share_and_the_forward_is_the_whole(tmp_path: Path):
    """load_model(hf_tp=True) over 2 gloo ranks: each rank holds half the query heads' rows and half the MLP's
    columns (DTensor shares), and the logits equal the whole model's up to fp32 summation order."""
    out = tmp_path / "hf_tp.pt"
    mp.spawn(tp_hf_plan_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    got = torch.load(out)
    whole = load_model(resolve_spec({"name": "tiny-qwen3-tp"}, "target"), "cpu", torch.float32).model
    q, down = whole.model.layers[0].self_attn.q_proj.weight, whole.model.layers[0].mlp.down_proj.weight
    assert got["q"] == (q.shape[0] // 2, q.shape[1]) and got["down"] == (down.shape[0], down.shape[1] // 2)
    torch.testing.assert_close(got["logits"], whole(torch.tensor([[3, 1, 4, 1, 5]])).logits, atol=2e-5, rtol=1e-5)


def test_transformers_forward_splits_through_tp_plan_at_tp_2(tmp_path: Path):
    """engine.backend=transformers at tensor_parallel=2 (as for an architecture our decoder does not cover): each
    rank loads its share through transformers' own tp_plan (DTensor weights, gloo) and runs transformers' forward;
    T=0 output equals target-only decoding at the same TP on every prompt, and here also tensor_parallel=1's tokens."""
    common = ("target=tiny-qwen3-tp", "strategy=draft_model", "draft=tiny-qwen3", "strategy.k=3", "dataset=builtin",
              "dataset.num_prompts=3", "max_new_tokens=10", "logger=none", "engine.backend=transformers")
    split = run(_cfg(*common, "engine.tensor_parallel=2", f"+output_dir={tmp_path / 'tp2'}"))
    whole = run(_cfg(*common, f"+output_dir={tmp_path / 'tp1'}"))
    results = json.loads((tmp_path / "tp2" / "results.json").read_text())
    assert results["run"]["tensor_parallel"] == 2
    assert results["exact_match"]["all_equal"] and results["exact_match"]["n"] == 3
    tokens = [[o["baseline_output_token_ids"] for o in r.outputs] for r in (split, whole)]
    assert tokens[0] == tokens[1]


def test_bad_tensor_parallel_settings_are_refused_before_loading(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"engine.tensor_parallel=0; allowed: an integer >= 1"):
        run(_cfg("target=tiny-qwen3-tp", "engine.tensor_parallel=0", "logger=none", f"+output_dir={tmp_path}"))
    # 3 query heads over 1 KV head: not over 2 ranks, refused from the preset's sizes before anything loads, and from
    # a loaded model's config
    with pytest.raises(ConfigError, match=r"tensor_parallel=2 for target 'tiny-llama'.*'num_attention_heads': 3, "
                                          r"'num_key_value_heads': 1.*do not divide by 2"):
        run(_cfg("target=tiny-llama", "strategy=none", "engine.tensor_parallel=2", "logger=none", f"+output_dir={tmp_path}"))
    with pytest.raises(ConfigError, match=r"'num_attention_heads': 3, 'num_key_value_heads': 1.*do not divide by 2"):
        raise_if_unshardable(tiny("tiny-llama").model.config, 2, "tiny-llama")


def test_shard_on_load_builds_each_ranks_share_and_the_forward_is_their_whole(tmp_path: Path):
    """engine.shard_on_load: each of 2 gloo ranks builds only its share of tiny-qwen3-tp (3 of 6 query heads, 1 of 2 KV
    heads, 45 of 90 MLP columns), different on each rank, with embedding, norms and LM head the same on both. The split
    forward equals the unsplit decoder over the model those shares make up (shares stacked in rank order)."""
    mp.spawn(tp_shard_on_load_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    shares = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    whole = tiny("tiny-qwen3-tp").model
    state = whole.state_dict()
    assert shares[0]["model.layers.0.self_attn.q_proj.weight"].shape == (3 * 8, 48)
    assert shares[0]["model.layers.0.mlp.down_proj.weight"].shape == (48, 45)
    for name in state:
        a, b = shares[0][name], shares[1][name]
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
            assert not torch.equal(a, b), name  # the ranks' shares differ
            state[name] = torch.cat([a, b], dim=0)  # output rows (heads, MLP columns) in rank order
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            assert not torch.equal(a, b), name
            state[name] = torch.cat([a, b], dim=1)  # input columns
        else:
            assert torch.equal(a, b), name  # replicated
            state[name] = a
    whole.load_state_dict(state)
    split = torch.load(tmp_path / "logits.pt")
    for a, b in zip(split, tp_forward_logits(DecoderRunner(whole))):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


def test_shard_on_load_through_the_cli_is_exact_with_a_draft_of_its_own(tmp_path: Path):
    """engine.shard_on_load=true at tensor_parallel=2: the ranks build their shares, a separate draft (tiny-qwen3,
    replicated) drafts, and T=0 output equals target-only decoding at the same TP on every prompt."""
    run(_cfg("target=tiny-qwen3-tp", "strategy=draft_model", "draft=tiny-qwen3", "strategy.k=3", "dataset=builtin",
             "dataset.num_prompts=3", "max_new_tokens=10", "logger=none", "engine.tensor_parallel=2",
             "engine.shard_on_load=true", f"+output_dir={tmp_path}"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["run"]["tensor_parallel"] == 2 and results["run"]["shard_on_load"] is True
    assert results["exact_match"]["all_equal"] and results["exact_match"]["n"] == 3


def test_shard_on_load_is_refused_where_a_rank_would_need_the_whole_target(tmp_path: Path):
    base = ["dataset=builtin", "dataset.num_prompts=1", "logger=none", "engine.shard_on_load=true",
            f"+output_dir={tmp_path}"]
    with pytest.raises(ConfigError, match=r"shard_on_load=true with engine.tensor_parallel=1; allowed: tensor_parallel "
                                          r">= 2"):
        run(_cfg("target=tiny-qwen3-tp", "strategy=none", *base))
    with pytest.raises(ConfigError, match=r"shard_on_load=true with draft='tiny-qwen3-tp', the target itself"):
        run(_cfg("target=tiny-qwen3-tp", "strategy=draft_model", "draft=self", "engine.tensor_parallel=2", *base))
    with pytest.raises(ConfigError, match=r"shard_on_load=true with strategy LayerSkipProposer"):
        run(_cfg("target=tiny-qwen3-tp", "strategy=layer_skip", "engine.tensor_parallel=2", *base))
    with pytest.raises(ConfigError, match=r"shard_on_load=true with target 'smollm2-135m' \(source 'preset'\)"):
        run(_cfg("target=smollm2-135m", "strategy=none", "engine.tensor_parallel=3", *base))
    with pytest.raises(ConfigError, match=r"shard_on_load=true with target 'tiny-qwen3-tp' on transformers' forward "
                                          r"\(engine.backend=transformers, model_type 'qwen3'\)"):
        run(_cfg("target=tiny-qwen3-tp", "strategy=none", "engine.tensor_parallel=2", "engine.backend=transformers",
                 *base))
    share = load_model(resolve_spec({"name": "tiny-qwen3-tp"}, "target"), "cpu", torch.float32, shard=(1, 2)).model
    with pytest.raises(ValueError, match=r"holds tensor-parallel rank 1's share of 2 only"):
        DecoderRunner(share)  # a runner that is not rank 1's (a draft reusing the target)
