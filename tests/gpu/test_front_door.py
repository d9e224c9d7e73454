"""The GPU suite (`pytest -m gpu`, skipped without CUDA): the front door on a real GPU.

Every check goes through the code path users run (`python -m specbench`, Hydra multirun, or run()),
with CUDA graphs on, bf16, random-weight presets at real sizes (no weights are downloaded):
- a token's logits are bit-identical in a 1-token forward, inside a (K+1)-token verify forward and at
  batch 64 (engine.batch_invariant), eager and replayed from a graph;
- a self-draft accepts everything (AL exactly k+1) at T=0 and T=1 for k = 1..5, and T=0 output equals
  target-only decoding on every prompt, for Qwen3-8B and Qwen3-32B;
- every registered strategy finishes in one `-m` process with mixed prompt lengths and batches of 4,
  T=0 output equal to target-only decoding; batch 64 likewise; no graph is captured while timing.
Run on the H200 whenever models/, kernels/, engine.py, run.py, verify.py or strategies/ change; the
log goes to experiments/gpu/suite-<date>-<commit>.txt (README: development).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from specbench_testing import cut_at_commonest_token
from specbench.run import CONF_DIR, available_strategies, run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU suite needs CUDA")]

COMMON = ["logger=none", "dataset=builtin", "max_new_tokens=32", "engine.ignore_eos=true"]
PAIR_8B = ["target=qwen3-8b-random", "draft=qwen3-0.6b-random"]


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _sweep(tmp_path: Path, *overrides: str, timeout: int = 900) -> list[dict]:
    """One `python -m specbench -m ...` process; every job's results.json (a failed job fails the test)."""
    out = tmp_path / "multirun"
    proc = subprocess.run([sys.executable, "-m", "specbench", "-m", *overrides, f"hydra.sweep.dir={out}",
                           "hydra.sweep.subdir=${hydra.job.num}"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [json.loads(p.read_text())["error"] for p in out.glob("*/error.json")]
    assert not errors, errors
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/results.json"))]


def _assert_exact(results: dict) -> None:
    """T=0: every prompt's output equals target-only decoding; no graph captured while timing."""
    run_ = results["run"]
    assert run_["graph_captures_while_timing"] == 0, run_
    if run_["temperature"] == 0 and run_["lossless"] and results.get("exact_match"):
        assert results["exact_match"]["all_equal"], (run_["strategy"], run_["k"], results["exact_match"])


def test_logits_are_batch_invariant_8b():
    """A token's logits: 1-token forwards == one 4-token verify == batch 64, eager and under graphs."""
    from specbench.models.cuda_graphs import GraphedRunner
    from specbench.models.decoder import DecoderRunner
    from specbench.models.loading import load_model, resolve_spec

    target = load_model(resolve_spec({"name": "qwen3-8b-random"}, "target"), "cuda", torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    lens, steps = [20, 45, 33], 4
    seqs = torch.randint(0, 50_000, (64, 64), generator=g).cuda()

    def logits(runner, rows: int, verify: bool) -> torch.Tensor:
        runner.allocate(rows, 256)
        plen = torch.tensor([lens[b % 3] for b in range(rows)], device="cuda")
        pmax = int(plen.max())
        pos = torch.arange(pmax, device="cuda").expand(rows, pmax)
        for c in range(0, pmax, 16):  # prefill in chunks of <= 16 tokens: the invariant kernels, so the cache
            e = min(pmax, c + 16)
            runner(seqs[:rows, c:e], pos[:, c:e].contiguous(), attn_len=e)  # is batch-invariant too
        positions = plen[:, None] + torch.arange(steps, device="cuda")  # [rows, 4]
        if verify:
            return runner(seqs[:rows].gather(1, positions), positions, attn_len=pmax + steps).logits.clone()
        outs = [runner(seqs[:rows].gather(1, positions[:, i : i + 1]), positions[:, i : i + 1].contiguous(),
                       attn_len=pmax + i + 1).logits.clone() for i in range(steps)]
        return torch.cat(outs, dim=1)

    plain = DecoderRunner(target.model, batch_invariant=True)
    one = logits(plain, 3, verify=False)
    assert torch.equal(logits(plain, 3, verify=True), one), "verify forward differs from 1-token forwards"
    wide = logits(plain, 64, verify=True)
    assert torch.equal(wide[:3], one), "batch 64 differs from batch 3"
    graphed = GraphedRunner(DecoderRunner(target.model, batch_invariant=True))
    assert torch.equal(logits(graphed, 3, verify=True), one), "graph replay differs from eager"
    assert torch.equal(logits(graphed, 3, verify=False), one)


@functools.lru_cache(maxsize=1)
def _model_06b():
    from specbench.models.loading import load_model, resolve_spec

    return load_model(resolve_spec({"name": "qwen3-0.6b-random"}, "draft"), "cuda", torch.bfloat16).model


def _forwards_06b(seed: int, graphs: bool) -> list[torch.Tensor]:
    """Qwen3-0.6B (random weights, loaded once, batch-invariant kernels), batch 3: logits of two 15-token prefill
    chunks (45 rows), five 1-token forwards (3 rows) and a 5-token one (15 rows), eager or replayed from graphs."""
    from specbench.models.cuda_graphs import GraphedRunner
    from specbench.models.decoder import DecoderRunner

    model = _model_06b()
    seqs = torch.randint(0, 50_000, (3, 40), generator=torch.Generator().manual_seed(seed)).cuda()
    runner = DecoderRunner(model, batch_invariant=True)
    runner = GraphedRunner(runner) if graphs else runner
    runner.allocate(3, 64)
    pos = torch.arange(40, device="cuda").expand(3, 40)
    outs = []
    for c in range(0, 30, 15):
        outs.append(runner(seqs[:, c:c + 15], pos[:, c:c + 15].contiguous(), attn_len=c + 15).logits.clone())
    for t in range(30, 35):
        outs.append(runner(seqs[:, t:t + 1], pos[:, t:t + 1].contiguous(), attn_len=t + 1).logits.clone())
    outs.append(runner(seqs[:, 35:40], pos[:, 35:40].contiguous(), attn_len=40).logits.clone())
    return outs


def _same_bits_either_way(switch, seed: int) -> None:
    """switch(True) and switch(False) give bit-identical `_forwards_06b`, eager and from graphs; the switch ends on."""
    try:
        for graphs in (False, True):
            switch(True)
            on = _forwards_06b(seed, graphs)
            switch(False)
            off = _forwards_06b(seed, graphs)
            assert all(torch.equal(a, b) for a, b in zip(on, off, strict=True)), f"graphs={graphs}"
    finally:
        switch(True)


def test_dependent_launch_keeps_every_bit_06b():
    """engine.pdl: the GEMMs launched as programmatic dependents give the same logits, bit for bit, as plain
    launches: 1-token and 5-token forwards at batch 3, eager and replayed from a graph."""
    from specbench.kernels import decode

    assert decode.pdl(torch.device("cuda")) == (torch.cuda.get_device_capability()[0] >= 9)
    _same_bits_either_way(decode.use_pdl, seed=1)


def test_fused_mlp_keeps_every_bit_06b(monkeypatch):
    """engine.fused_mlp: the MLP in one launch (a grid barrier between gate/up and down) gives the same logits, bit
    for bit, as its three launches: 1-token and 5-token forwards at batch 3 (45-row prefill chunks take three
    launches), eager and replayed from graphs, each 1-token graph replayed five times (the barrier leaves its counter
    ready for the next launch)."""
    from specbench.kernels import skinny_gemm

    # one launch at every row count, whatever the tuner would keep (a stand-in for it; candidate 5 prefetches)
    monkeypatch.setattr(skinny_gemm, "_MLP_TUNED", {})
    monkeypatch.setattr(skinny_gemm, "_tune_mlp", lambda *args: skinny_gemm._MLP_CANDIDATES[5])
    _same_bits_either_way(skinny_gemm.use_fused_mlp, seed=2)
    assert set(skinny_gemm._MLP_TUNED.values()) == {skinny_gemm._MLP_CANDIDATES[5]}  # it ran, at 3 and 15 rows


def test_self_draft_is_exact_for_k_1_to_5_in_one_sweep_8b(tmp_path: Path):
    results = _sweep(tmp_path, *COMMON, "target=qwen3-8b-random", "strategy=draft_model", "draft=self",
                     "strategy.k=1,2,3,4,5", "sampling.temperature=0,1", "dataset.num_prompts=6")
    assert len(results) == 10
    for r in results:
        _assert_exact(r)
        assert r["strategy"]["acceptance_length"] == r["run"]["k"] + 1, (r["run"], r["strategy"]["acceptance_length"])
        assert r["strategy"]["draft_forwards_per_step"] == r["run"]["k"]
        assert r["run"]["pdl"] is True  # engine.pdl's default, on the H200
        assert r["run"]["fused_mlp"] is True  # engine.fused_mlp's


def test_seed_pr_scheme_is_exact_with_one_more_draft_forward_8b(tmp_path: Path):
    """one_extra_forward_pass + drop_first_drafted_tokens under CUDA graphs: still AL exactly k+1, k+1 forwards."""
    results = _sweep(tmp_path, *COMMON, "target=qwen3-8b-random", "strategy=draft_model", "draft=self", "strategy.k=3",
                     "strategy.one_extra_forward_pass=true", "strategy.drop_first_drafted_tokens=true",
                     "sampling.temperature=0,1", "dataset.num_prompts=6")
    assert len(results) == 2
    for r in results:
        _assert_exact(r)
        assert r["strategy"]["acceptance_length"] == 4.0
        assert r["strategy"]["draft_forwards_per_step"] == 4.0


def test_every_strategy_in_one_process_8b(tmp_path: Path):
    """Issue 9's sweep: every registered strategy x k=1,3 x T=0,1 in one `-m` process (eagle and medusa with
    `checkpoint: auto`, i.e. untrained heads built for the random-weight 8B), batch 1, builtin prompts. A yaml that
    drafts a tree (eagle_tree, a preset of eagle) runs at its own settings, T=0,1, in a second process (its tree
    has more nodes than k=1 can make)."""
    names = available_strategies()
    strategies = {n: _cfg(f"strategy={n}").strategy for n in names}
    trees = [n for n in names if strategies[n].get("tree", "chain") != "chain"]
    chains = [n for n in names if n not in trees]
    # the yamls of a trained head's class (eagle, medusa and their presets: eagle_tree, eagle_adaptive)
    heads = [n for n in names if strategies[n]["_target_"].endswith((".EagleProposer", ".MedusaProposer"))]
    results = _sweep(tmp_path, *COMMON, *PAIR_8B, f"strategy={','.join(chains)}", "strategy.k=1,3",
                     "sampling.temperature=0,1")
    if trees:
        results += _sweep(tmp_path / "trees", *COMMON, *PAIR_8B, f"strategy={','.join(trees)}", "sampling.temperature=0,1")
    assert len(results) == 4 * len(chains) + 2 * len(trees)
    assert {r["run"]["strategy"] for r in results} == set(names)
    for r in results:
        _assert_exact(r)
        if r["run"]["strategy"] in heads:
            assert r["run"]["checkpoint"]["random_init"] is True


def test_batch_64_mixed_lengths_8b(tmp_path: Path):
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial box".split()
    prompts = tmp_path / "prompts.jsonl"
    with prompts.open("w") as f:
        for i in range(70):  # a batch of 64, then a batch of 6
            f.write(json.dumps({"id": f"p{i}", "prompt": " ".join(words[: 3 + (i * 7) % 15]) * (1 + i % 4)}) + "\n")
    r = run(_cfg("logger=none", "max_new_tokens=24", "engine.ignore_eos=true", *PAIR_8B, "strategy=draft_model",
                 "strategy.k=1", "engine.batch_size=64", "dataset=jsonl", f"dataset.path={prompts}", "dataset.num_prompts=null",
                 f"output_dir={tmp_path / 'b64'}")).results
    _assert_exact(r)
    assert r["exact_match"]["n"] == 70


@pytest.mark.parametrize("draft", ["self", "qwen3-1.7b-random"])
def test_32b_output_equals_target_only(tmp_path: Path, draft: str):
    r = run(_cfg(*COMMON, "target=qwen3-32b-random", f"draft={draft}", "strategy=draft_model", "strategy.k=3",
                 "dataset.num_prompts=4", f"output_dir={tmp_path / draft}")).results
    _assert_exact(r)
    if draft == "self":
        assert r["strategy"]["acceptance_length"] == 4.0


def test_topk_trees_are_exact_8b(tmp_path: Path):
    """Trees on the GPU: a self-draft top-2 tree accepts its whole chain (AL exactly k+1) at T=0 and T=1, and T=0
    output equals target-only decoding. Tree verify forwards run on the batch-invariant kernels (decode_attention
    with an ancestor path), so every node's bf16 logits are its chain's bit for bit."""
    results = _sweep(tmp_path, *COMMON, "target=qwen3-8b-random", "strategy=draft_model", "draft=self", "strategy.k=3",
                     "strategy.tree=topk", "strategy.top_k=2", "sampling.temperature=0,1", "dataset.num_prompts=6")
    assert len(results) == 2
    for r in results:
        assert r["strategy"]["nodes_per_step"] == 6.0
        _assert_exact(r)
        assert r["strategy"]["acceptance_length"] == 4.0, r["strategy"]["acceptance_length"]


def test_dynamic_trees_are_exact_8b(tmp_path: Path):
    """EAGLE-2 style dynamic trees on the GPU, self-drafted: the draft's frontier forwards (scratch slots, ancestor
    paths) run on the batch-invariant tree kernels. One wide (top_k=1, 3 nodes) the expansion is the greedy chain
    and must be accepted whole (AL exactly 4.00); top_k=2 with 3 nodes must still accept the first depth every
    step (AL >= 2); T=0 output equals target-only decoding in both. At k=5 the 3 nodes are fewer than the depths
    (the accepted path is at most 3 long: the same ALs)."""
    results = _sweep(tmp_path, *COMMON, "target=qwen3-8b-random", "strategy=draft_model", "draft=self", "strategy.k=3,5",
                     "strategy.tree=dynamic", "strategy.top_k=1,2", "strategy.num_nodes=3", "dataset.num_prompts=4")
    assert sorted((r["config"]["strategy"]["k"], r["config"]["strategy"]["top_k"]) for r in results) == [
        (3, 1), (3, 2), (5, 1), (5, 2)]
    for r in results:
        _assert_exact(r)
        al = r["strategy"]["acceptance_length"]
        assert al == 4.0 if r["config"]["strategy"]["top_k"] == 1 else al >= 2.0, (r["config"]["strategy"], al)


def test_continuous_batching_is_exact_8b(tmp_path: Path):
    """engine.scheduler=continuous: 10 prompts over 4 slots, rows ending at a stop token (the commonest token of
    target-only decoding's outputs) at different steps. Each request is prefilled alone and decoded on the
    batch-invariant kernels, so every output, the baseline's and the strategy's, equals static batch-1 decoding cut
    at that token; a self-draft accepts everything at T=0 and T=1; no graph is captured while timing."""
    alone = run(_cfg(*COMMON, *PAIR_8B, "strategy=draft_model", "strategy.k=3", f"output_dir={tmp_path / 'b1'}"))
    full = [o["baseline_output_token_ids"] for o in alone.outputs]
    assert [o["output_token_ids"] for o in alone.outputs] == full
    stop, expected = cut_at_commonest_token(full)
    assert len({len(e) for e in expected}) > 1, "the stop token should end the prompts at different lengths"
    for draft, temperature in (("qwen3-0.6b-random", 0), ("self", 0), ("self", 1)):
        r = run(_cfg("logger=none", "dataset=builtin", "max_new_tokens=32", "target=qwen3-8b-random", f"draft={draft}",
                     "strategy=draft_model", "strategy.k=3", "engine.scheduler=continuous", "engine.batch_size=4",
                     f"engine.stop_token_ids=[{stop}]", f"sampling.temperature={temperature}",
                     f"output_dir={tmp_path / f'{draft}-{temperature}'}"))
        run_ = r.results["run"]
        assert run_["scheduler"] == "continuous" and run_["graph_captures_while_timing"] == 0, run_
        if temperature == 0:
            for key in ("baseline_output_token_ids", "output_token_ids"):
                bad = [(i, e, o[key]) for i, (e, o) in enumerate(zip(expected, r.outputs)) if o[key] != e]
                assert not bad, (draft, key, stop, bad[:2])
        if draft == "self":
            al = r.results["strategy"]["acceptance_length"]
            assert al == 4.0, (temperature, al)


def test_two_processes_decode_alike_8b(tmp_path: Path):
    """T=0 output does not depend on the process: this one (after other tests tuned their kernels here) and a fresh
    `-m` process give the same tokens, baseline and strategy. Each process times the invariant GEMM's candidate
    configurations and may pick others; all of them sum in one order (kernels/skinny_gemm.py). This failed on
    2026-12-02 (3423a14), when the timing also chose the split of K."""
    overrides = [*COMMON, *PAIR_8B, "strategy=draft_model", "strategy.k=3"]
    here = run(_cfg(*overrides, f"output_dir={tmp_path / 'here'}"))
    _sweep(tmp_path, *overrides)
    there = [json.loads(line) for line in (tmp_path / "multirun" / "0" / "outputs.jsonl").read_text().splitlines()]
    for key in ("baseline_output_token_ids", "output_token_ids"):
        bad = [i for i, (a, b) in enumerate(zip(here.outputs, there)) if a[key] != b[key]]
        assert len(there) == len(here.outputs) and not bad, (key, bad)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="tensor parallelism needs 2 GPUs (nvidia-h200-x2)")
def test_tensor_parallel_2_self_draft_is_exact_8b(tmp_path: Path):
    """engine.tensor_parallel=2 through the CLI: the ranks start themselves (NCCL, cuda:0 and cuda:1), the graphs
    capture the all-reduces; a self-draft (replicated, unsplit) accepts everything and T=0 output equals
    target-only decoding at TP=2."""
    results = _sweep(tmp_path, *COMMON, "target=qwen3-8b-random", "strategy=draft_model", "draft=self", "strategy.k=3",
                     "engine.tensor_parallel=2", "sampling.temperature=0,1", "dataset.num_prompts=4")
    assert len(results) == 2
    for r in results:
        assert r["run"]["tensor_parallel"] == 2
        _assert_exact(r)
        assert r["strategy"]["acceptance_length"] == 4.0, r["strategy"]["acceptance_length"]


def test_vlm_target_on_the_fast_path_3b(tmp_path: Path):
    """Qwen2.5-VL-3B (random) on FastVLMRunner: the image prompts' prefill through transformers, every later forward
    on our decoder under CUDA graphs (no capture while timing); with the 0.6B text draft T=0 output equals
    target-only decoding, and drafting for itself it accepts everything at T=0 and T=1."""
    results = _sweep(tmp_path, "logger=none", "max_new_tokens=32", "engine.ignore_eos=true", "dataset=images",
                     "dataset.num_prompts=6", "engine.batch_size=3", "target=qwen2.5-vl-3b-random", "strategy=draft_model",
                     "draft=qwen3-0.6b-random,self", "strategy.k=3", "sampling.temperature=0,1")
    assert len(results) == 4
    for r in results:
        _assert_exact(r)
        if r["run"]["draft"] == r["run"]["target"]:
            assert r["strategy"]["acceptance_length"] == 4.0, r["strategy"]["acceptance_length"]
