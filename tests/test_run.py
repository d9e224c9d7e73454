"""run(cfg) through Hydra's compose API: outputs, metrics, and every bad input's message."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from specbench_testing import local_model_dir, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.logging import results_table
from specbench.models.loading import resolve_spec
from specbench.report import build_report
from specbench.run import CONF_DIR, plan, run
from specbench.strategies.eagle import EagleConfig, EagleHead

TINY = ["target=tiny-llama", "strategy=draft_model", "dataset=builtin", "dataset.num_prompts=5", "max_new_tokens=6", "logger=none"]


def cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_config_is_the_embedded_default():
    c = cfg()
    assert c.target.name == "smollm2-135m" and c.draft.name == "auto" and c.strategy.name == "eagle_auto"
    assert (c.strategy.tree, c.strategy.k, c.strategy.k_schedule, c.strategy.confidence_threshold) == ("auto", 4, "confidence", {"chain": 0.3, "dynamic": 0.4})
    assert c.dataset.name == "mt-bench" and c.logger.name == "wandb" and c.sampling.temperature == 0
    assert plan(c).draft is None  # eagle reads the target's features; no draft model to load
    p = plan(cfg("strategy=draft_model"))
    assert p.draft is not None and p.draft.name == "smollm2-135m"  # draft=auto: the preset's pair (itself)


def test_draft_auto_picks_the_preset_pair():
    p = plan(cfg("target=qwen3-32b", "strategy=draft_model", "dataset=builtin"))
    assert p.target.path == "Qwen/Qwen3-32B" and p.draft.name == "qwen3-1.7b" and p.draft.path == "Qwen/Qwen3-1.7B"
    assert plan(cfg("target=qwen3-8b-random", "strategy=draft_model", "dataset=builtin")).draft.name == "qwen3-0.6b-random"


def test_run_writes_results_and_outputs(tmp_path: Path):
    report = run(cfg(*TINY, "draft=self", "strategy.k=2", f"+output_dir={tmp_path}", "engine.batch_size=2"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["strategy"]["acceptance_length"] == 3.0  # self-draft, k=2
    assert results["exact_match"] == {"equal": 5, "n": 5, "all_equal": True, "first_mismatch_index": None}
    assert results["baseline"]["acceptance_length"] == 1.0
    for key in ("drafts", "draft_tokens", "accepted_tokens", "acceptance_rate", "per_position_acceptance",
                "ttft_ms", "tpot_ms", "itl_ms", "output_tokens_per_s", "time_split"):
        assert key in results["strategy"], key
    assert set(results["strategy"]["tpot_ms"]) == {"mean", "median", "p90", "p99", "n"}
    assert results["speedup"]["speedup"] > 0
    assert results["environment"]["torch"] and "git_sha" in results["environment"]
    env = results["environment"]  # a CPU run names the CPU and its units (they decide engine.dtype=auto and the speed)
    assert env["cpu"] and env["cpu_capability"] and isinstance(env["onednn_bf16"], bool)
    assert isinstance(env["cpu_forms"], dict)  # the product form each weight shape took ("auto"; empty otherwise)
    assert set(results["by_category"])  # builtin prompts carry categories
    lines = [json.loads(x) for x in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and lines[0]["prompt_id"].startswith("builtin/")
    assert lines[0]["prompt_token_ids"] and len(lines[0]["output_token_ids"]) == 6
    assert lines[0]["output_token_ids"] == lines[0]["baseline_output_token_ids"]
    assert report.results["run"]["lossless"] is True


def test_wandb_offline_logging_writes_a_run(tmp_path: Path):
    run(cfg(*TINY[:-1], "dataset.num_prompts=2", "logger=wandb", "strategy=none", f"+output_dir={tmp_path}"))
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline W&B run directory"


def test_the_wandb_summary_holds_the_figures_and_their_intervals(tmp_path: Path):
    """A real (offline) W&B run's summary, read before it finishes, from a real run's results."""
    from specbench.logging import WandbLogger

    results = run(cfg(*TINY, "draft=self", "strategy.k=2", "sampling.temperature=1", f"+output_dir={tmp_path}")).results
    logger = WandbLogger(tmp_path, {}, None, "summary-test")
    try:
        logger.log_results(results)
        summary = dict(logger.run.summary)
    finally:
        logger.finish()
    assert summary["speedup"] == results["speedup"]["speedup"]
    assert [summary["speedup_ci95_low"], summary["speedup_ci95_high"]] == results["speedup"]["ci95"]
    assert summary["strategy/acceptance_length"] == 3.0  # a self-draft accepts all k at T=1 too
    assert summary["strategy/acceptance_length_ci95_low"] == summary["strategy/acceptance_length_ci95_high"] == 3.0


BAD = [
    (["strategy=eagle_typo"], None),  # Hydra itself refuses an unknown config group option
    (["strategy.k=0"], "strategy.k=0 for strategy 'draft_model'; allowed: an integer >= 1"),
    (["strategy.k=-2"], "allowed: an integer >= 1"),
    (["sampling.temperature=-1"], "sampling.temperature=-1"),
    (["sampling.top_p=0"], "sampling.top_p=0"),
    (["sampling.top_p=1.2"], "allowed: a number in (0, 1]"),
    (["sampling.top_k=-3"], "sampling.top_k=-3"),
    (["target.name=nope-7b"], "unknown target model 'nope-7b'; allowed:"),
    (["draft=smollm2-135m-random"], "has a vocabulary of 49152 entries, larger than target 'tiny-llama'"),
    (["dataset._target_=specbench.data.prompts.Nope", "dataset.name=nope"], "unknown dataset 'nope'; allowed: builtin"),
    (["dataset=jsonl", "dataset.path=/no/such/file.jsonl"], "/no/such/file.jsonl"),
    (["target.path=/no/such/model.gguf"], "does not exist"),
    (["max_new_tokens=0"], "max_new_tokens=0"),
    (["engine.batch_size=0"], "engine.batch_size=0"),
    (["engine.dtype=float8"], "unknown engine.dtype 'float8'"),
    (["engine.cuda_graphs=maybe"], "unknown engine.cuda_graphs 'maybe'; allowed: auto, false, true"),
    (["engine.batch_invariant=maybe"], "unknown engine.batch_invariant 'maybe'; allowed: auto, false, true"),
    (["engine.device=cpu", "engine.dtype=float32", "engine.batch_invariant=true", "engine.backend=transformers"],
     "engine.batch_invariant=true in float32 on the CPU with engine.backend=transformers"),
    (["verify.synthetic_per_position=[0.5,1.5]"], "verify.synthetic_per_position=[0.5, 1.5]; allowed: a list of rates in [0, 1]"),
    (["logger=wandb", "+logger.projet=x"], "logger 'wandb': got an unexpected keyword argument 'projet'"),
    # issue 10: checks the configuration decides, before a model loads
    (["+strategy.kk=3"], "unknown setting(s) ['kk'] for strategy 'draft_model'; allowed: confidence_threshold, cross_tokenizer, drop_first_drafted_tokens, k, k_by_batch_size, k_schedule, lookbehind, name, num_nodes, one_extra_forward_pass, top_k, tree, tree_choices"),
    (["strategy=layer_skip", "strategy.num_layers=5"], "strategy.num_layers=5 for strategy 'layer_skip'; allowed: an integer in 1..1"),
    (["strategy=layer_skip", "engine.backend=transformers"], "layer_skip with engine.backend='transformers'"),
    (["strategy=eagle", "strategy.checkpoint=eagle-smollm2-135m"],
     "eagle checkpoint 'eagle-smollm2-135m' was trained for hidden size 576, vocab 49152 "
     "(target 'smollm2-135m'); target 'tiny-llama' has 48, 101"),
    (["strategy=medusa", "strategy.checkpoint=medusa-smollm2-135m"],
     "medusa checkpoint 'medusa-smollm2-135m' was trained for hidden size 576"),
    # checkpoint=auto on a target with real weights and no shipped head: say so, never fall back to another's
    (["strategy=eagle", "target=qwen3-8b", "draft=qwen3-0.6b"],
     "strategy.checkpoint=auto: no eagle checkpoint in specbench/checkpoints/ was trained for target 'qwen3-8b'"),
    (["strategy=medusa", "target=qwen3-8b", "draft=qwen3-0.6b"],
     "strategy.checkpoint=auto: no medusa checkpoint in specbench/checkpoints/ was trained for target 'qwen3-8b'"),
    (["strategy=eagle", "target=smollm2-135m", "strategy.checkpoint=eagle-smollm2-135m/no-such-subdir"],
     "strategy.checkpoint='eagle-smollm2-135m/no-such-subdir' does not exist"),
    (["strategy.k=1000"], "= 1008 positions exceeds max_position_embeddings=512 of target 'tiny-llama'"),
    (["target.source=random", "target.path=/tmp"], "target.source=random builds a preset's architecture"),
    (["baseline_order=alternate"], "unknown baseline_order 'alternate'; allowed: interleaved, sequential"),
]


@pytest.mark.parametrize("overrides, message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_fails_before_any_model_loads(overrides, message):
    if message is None:
        with pytest.raises(Exception, match="eagle_typo"):
            cfg(*TINY, *overrides)
        return
    with pytest.raises(ConfigError) as e:
        plan(cfg(*TINY, *overrides))
    assert message in str(e.value)


def test_a_hub_draft_that_cannot_be_fetched_stops_the_job_before_anything_loads(tmp_path: Path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"^draft 'someorg/tiny-draft' \(hub id 'someorg/tiny-draft'\) cannot be fetched"):
        run(cfg(*TINY, "draft.path=someorg/tiny-draft", f"+output_dir={tmp_path}"))
    assert not (tmp_path / "results.json").exists()


def test_unknown_strategy_class_lists_the_available_ones():
    c = cfg(*TINY, "strategy._target_=specbench.strategies.nope.Nope", "strategy.name=nope")
    with pytest.raises(ConfigError, match=r"unknown strategy 'nope'; allowed: .*draft_model.*none"):
        plan(c)


def test_prompt_longer_than_the_context_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="max_model_len"):
        run(cfg(*TINY, "max_model_len=20", f"+output_dir={tmp_path}"))
    assert not (tmp_path / "results.json").exists()


def test_a_tree_needs_its_verify_window_inside_max_model_len(tmp_path: Path):
    """A chain needs k+1 slots past the output; a tree needs its nodes_per_step+1: a max_model_len that fits the
    chain exactly is refused for a 3-wide tree of the same depth, before anything is decoded."""
    with pytest.raises(ConfigError, match=r"is (\d+) tokens long") as e:
        run(cfg(*TINY, "max_model_len=8", f"+output_dir={tmp_path}"))
    longest = int(re.search(r"is (\d+) tokens long", str(e.value)).group(1))
    fits_chain = f"max_model_len={longest + 6 + 2 + 1}"  # 6 new tokens, k=2, the verify slot
    run(cfg(*TINY, fits_chain, "strategy.k=2", "engine.warmup=false", f"+output_dir={tmp_path / 'chain'}"))
    with pytest.raises(ConfigError, match=r"\+ 7 extra \(strategy slack\).*max_model_len"):
        run(cfg(*TINY, fits_chain, "strategy.k=2", "strategy.tree=topk", "strategy.top_k=3", "engine.warmup=false",
                f"+output_dir={tmp_path / 'tree'}"))
    assert not (tmp_path / "tree" / "results.json").exists()


# --- issue 10: results that cannot lie ---------------------------------------------------------------

FAST = ["dataset=builtin", "dataset.num_prompts=2", "max_new_tokens=4", "logger=none", "engine.warmup=false"]


def test_a_model_loaded_by_path_is_labelled_by_its_path(tmp_path: Path):
    # the target group's default is the smollm2-135m preset; weights from elsewhere must not carry its name
    weights = local_model_dir(tmp_path / "weights")
    run(cfg(f"target.path={weights}", "strategy=draft_model", "draft=self", "strategy.k=2", *FAST,
            f"+output_dir={tmp_path / 'job'}"))
    results = json.loads((tmp_path / "job" / "results.json").read_text())
    assert results["run"]["target"] == results["run"]["draft"] == str(weights)
    assert results["run"]["target_files"] == str(weights.resolve())
    assert results["strategy"]["acceptance_length"] == 3.0  # the self-draft really shares the path's weights
    jobs = build_report([tmp_path / "job"], tmp_path / "report").collected.jobs
    assert [(j.row["target"], j.row["draft"]) for j in jobs] == [(str(weights), str(weights))]


def test_a_draft_directory_is_named_by_its_path_and_checked_before_loading(tmp_path: Path):
    big = local_model_dir(tmp_path / "big-vocab", weights=False, vocab_size=50_000)
    with pytest.raises(ConfigError) as e:
        plan(cfg(*TINY, "draft=tiny-llama", f"draft.path={big}"))  # config.json is read; no weights loaded
    assert f"draft {str(big)!r} has a vocabulary of 50000 entries, larger than target 'tiny-llama'" in str(e.value)


def test_prompts_past_the_models_max_position_embeddings_are_refused(tmp_path: Path):
    # the plan passes (4 + k 1 + 2 <= 16); the prompts, known once tokenized, do not fit the model's positions
    short = local_model_dir(tmp_path / "short", max_position_embeddings=16)
    c = cfg(f"target.path={short}", "strategy=draft_model", "draft=self", "strategy.k=1", *FAST, f"+output_dir={tmp_path / 'job'}")
    plan(c)
    with pytest.raises(ConfigError, match=rf"exceeds max_position_embeddings=16 of target '{short}'.*Lower max_new_tokens"):
        run(c)
    assert not (tmp_path / "job" / "results.json").exists()


def test_results_record_the_checkpoint_files_loaded_and_their_hash(tmp_path: Path):
    model = tiny("tiny-llama")
    torch.manual_seed(0)
    EagleHead(EagleConfig.for_target(model.model.config, None, "tiny-llama"), model.model).save(tmp_path / "head")
    report = run(cfg(*TINY, "strategy=eagle", f"strategy.checkpoint={tmp_path / 'head'}", "strategy.k=2", *FAST,
                     f"+output_dir={tmp_path / 'job'}"))
    weights = (tmp_path / "head" / "model.safetensors").resolve()
    assert report.results["run"]["checkpoint"] == {
        "given": str(tmp_path / "head"), "weights": str(weights), "config": str(weights.with_name("config.json")),
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(), "trained_for": "tiny-llama"}


@pytest.mark.parametrize("strategy", ["eagle", "medusa"])
def test_checkpoint_auto_is_a_random_head_for_a_random_target(tmp_path: Path, strategy: str):
    """The yaml default `checkpoint: auto` on a random-weight target builds an untrained head (the same on every
    run), records that in results.json, and stays lossless."""
    runs = [run(cfg(*TINY, f"strategy={strategy}", "strategy.k=2", *FAST, f"+output_dir={tmp_path / str(i)}"))
            for i in range(2)]
    record = runs[0].results["run"]["checkpoint"]
    assert record == {"given": "auto", "random_init": True, "seed": 0, "trained_for": None}
    assert runs[0].results["exact_match"]["all_equal"]
    assert [o["output_token_ids"] for o in runs[0].outputs] == [o["output_token_ids"] for o in runs[1].outputs]
    assert runs[0].results["strategy"]["acceptance_length"] == runs[1].results["strategy"]["acceptance_length"]


def test_checkpoint_auto_finds_the_shipped_head_for_its_target():
    from specbench.models.loading import resolve_spec
    from specbench.strategies.checkpoints import resolve_checkpoint

    target = resolve_spec({"name": "smollm2-135m"}, "target")
    assert resolve_checkpoint("auto", "eagle", target) == "eagle-smollm2-135m"
    assert resolve_checkpoint("auto", "medusa", target) == "medusa-smollm2-135m"
    assert resolve_checkpoint("auto", "eagle", resolve_spec({"name": "smollm2-135m-random"}, "target")) == "random"
    assert resolve_checkpoint("/some/dir", "eagle", target) == "/some/dir"


def test_same_seed_and_batch_size_give_the_same_sampled_tokens(tmp_path: Path):
    """README, "Seeds": at T > 0 the same seed, prompts and batch size give the same tokens."""
    c = [*TINY, "draft=self", "strategy.k=2", "sampling.temperature=1", "engine.batch_size=2", "baseline=false",
         "dataset.num_prompts=3", "engine.warmup=false"]
    a = run(cfg(*c, f"+output_dir={tmp_path / 'a'}")).outputs
    b = run(cfg(*c, f"+output_dir={tmp_path / 'b'}")).outputs
    assert [o["output_token_ids"] for o in a] == [o["output_token_ids"] for o in b]


def test_warmup_never_changes_sampled_tokens(tmp_path: Path):
    """engine.warmup is a timing setting: at T=1 with the same seed the tokens are the same with and without
    it. A self-draft accepts every draft, so its output IS the draft's samples: a warm-up that consumed the
    draft's random stream (as it did before reseed()) changes every row."""
    c = [*TINY, "draft=self", "strategy.k=2", "sampling.temperature=1", "engine.batch_size=2", "dataset.num_prompts=3"]
    on = run(cfg(*c, "engine.warmup=true", f"+output_dir={tmp_path / 'on'}")).outputs
    off = run(cfg(*c, "engine.warmup=false", f"+output_dir={tmp_path / 'off'}")).outputs
    assert [o["output_token_ids"] for o in on] == [o["output_token_ids"] for o in off]
    assert [o["baseline_output_token_ids"] for o in on] == [o["baseline_output_token_ids"] for o in off]


def test_baseline_and_strategy_take_turns_batch_by_batch(tmp_path: Path, monkeypatch):
    """baseline_order=interleaved (the default): static batches alternate A B, B A, A B, so a machine that drifts
    drifts on both sides; sequential runs every baseline batch first. The order changes no token, at T = 1 too
    (each engine draws from its own streams)."""
    calls: list[tuple[str, int]] = []
    generate = Engine.generate

    def recorded(self, prompts, *args, **kwargs):  # the real generate, its calls recorded
        calls.append((type(self.proposer).__name__, len(prompts)))
        return generate(self, prompts, *args, **kwargs)

    monkeypatch.setattr(Engine, "generate", recorded)
    c = [*TINY, "draft=self", "strategy.k=2", "sampling.temperature=1", "engine.batch_size=2", "engine.warmup=false"]
    turns = run(cfg(*c, f"+output_dir={tmp_path / 'turns'}"))
    t, d = "TargetOnly", "DraftModelProposer"
    assert calls == [(t, 2), (d, 2), (d, 2), (t, 2), (t, 1), (d, 1)]  # 5 prompts: batches of 2, 2, 1
    assert turns.results["run"]["order"] == "interleaved"
    assert "batches in turns" in results_table(turns.results)
    calls.clear()
    first = run(cfg(*c, "baseline_order=sequential", f"+output_dir={tmp_path / 'first'}"))
    assert calls == [(t, 2), (t, 2), (t, 1), (d, 2), (d, 2), (d, 1)]
    assert first.results["run"]["order"] == "sequential"
    for key in ("output_token_ids", "baseline_output_token_ids"):
        assert [o[key] for o in turns.outputs] == [o[key] for o in first.outputs]
    calls.clear()
    one = run(cfg(*c, "engine.batch_size=8", f"+output_dir={tmp_path / 'one'}"))  # one batch: nothing to alternate
    assert calls == [(t, 5), (d, 5)] and one.results["run"]["order"] == "sequential"


def test_dtype_auto_on_the_cpu_is_bf16_only_where_the_decoder_is_bit_invariant(monkeypatch):
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "onednn_bf16", lambda: True)  # the sizes rule, whatever this CPU has,
    monkeypatch.setattr(dec, "onednn_shapes_row_invariant", lambda shapes, dtype: True)  # and whatever its probe finds
    assert plan(cfg("engine.device=cpu")).dtype == torch.bfloat16  # smollm2-135m: 576 / 9 x 64 / 1536
    assert plan(cfg("engine.device=cpu", "engine.dtype=float32")).dtype == torch.float32  # asked for
    for off in (["target=tiny-llama", "strategy=draft_model"],  # hidden 48: not a multiple of 64
                ["engine.backend=transformers"], ["engine.batch_invariant=false"]):
        assert plan(cfg("engine.device=cpu", *off)).dtype == torch.float32, off
    monkeypatch.setattr(dec, "onednn_shapes_row_invariant", lambda shapes, dtype: False)  # a shape rounding by row count
    assert plan(cfg("engine.device=cpu")).dtype == torch.float32
    monkeypatch.setattr(dec, "onednn_bf16", lambda: False)  # a CPU without bf16 GEMMs in oneDNN
    assert plan(cfg("engine.device=cpu")).dtype == torch.float32


def test_batch_invariant_true_makes_float32_on_the_cpu_bit_invariant_or_refuses(monkeypatch, tmp_path: Path):
    """engine.batch_invariant=true in float32 on the CPU: the target's runner takes the oneDNN path (results.json says
    so, T=0 output still the target's), or, where this CPU's oneDNN float32 product is not row-invariant, a
    ConfigError before any model loads. auto leaves float32 on the fast products."""
    import specbench.models.decoder as dec
    import specbench.run as run_module

    c = [*TINY, "engine.device=cpu", "engine.dtype=float32", "dataset.num_prompts=2", f"+output_dir={tmp_path}"]
    assert not plan(cfg(*c)).float32_invariant and not plan(cfg(*c, "engine.batch_invariant=false")).float32_invariant
    if dec.cpu_float32_invariant(resolve_spec({"name": "tiny-llama"}, "target").known):
        result = run(cfg(*c, "engine.batch_invariant=true"))
        assert result.results["run"]["float32_invariant"] is True
        assert result.results["exact_match"]["all_equal"] and result.results["exact_match"]["n"] == 2
    monkeypatch.setattr(run_module, "cpu_float32_invariant", lambda known: False)
    with pytest.raises(ConfigError, match="not row-invariant for its shapes; allowed: engine.batch_invariant=auto"):
        plan(cfg(*c, "engine.batch_invariant=true"))
