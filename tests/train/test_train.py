"""specbench.train end to end on a tiny random target: distil, train, save, resume, load into the strategy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from specbench_testing import tiny
from specbench.config import CONF_DIR
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.eagle import EagleProposer
from specbench.strategies.medusa import MedusaProposer
from specbench.train.loop import train
from specbench.verify import SamplingParams, Verifier

CONF = str(CONF_DIR / "train")
SPEC_BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "spec_bench" / "question.jsonl"


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    """Six training prompts (Spec-Bench's non-MT-Bench rows when the file is here, else made up)."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [{"question_id": i, "category": "qa", "turns": [f"Question {i}: why is the sky blue? " * (i + 1)]}
            for i in range(6)]
    rows.append({"question_id": 99, "category": "writing", "turns": ["an MT-Bench category: excluded"]})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def _cfg(tmp_path, prompts_file, *overrides):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[
            "target=tiny-llama", "logger=none", f"output_dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'data'}",
            f"data.path={prompts_file}", "data.num_prompts=6", "data.max_new_tokens=6", "data.batch_size=4",
            "train.batch_size=2", "train.ce_vocab=40", "train.ce_positions=8", "train.save_every=2", "train.val_sequences=1",
            "train.log_every=1", *overrides])


def test_eagle_trains_resumes_and_loads(tmp_path, prompts_file):
    ckpt = train(_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=2"))
    run = tmp_path / "run"
    assert (ckpt / "model.safetensors").exists() and json.loads((run / "last" / "state.json").read_text())["step"] == 2
    shards = sorted((tmp_path / "data").glob("distill-*.shards/*.pt"))
    assert len(shards) == 2  # 6 prompts in batches of 4, cached: a rerun does not regenerate
    stamps = [s.stat().st_mtime_ns for s in shards]
    ckpt = train(_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=4", "resume=true"))
    assert [s.stat().st_mtime_ns for s in shards] == stamps  # the resumed run read the shards, wrote none
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[0] == 1 and max(steps) == 4 and 3 in steps  # the second run went on from step 2
    assert json.loads((run / "last" / "state.json").read_text())["step"] == 4

    target = tiny("tiny-llama")
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=torch.device("cpu"))
    EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(ckpt)})
    engine = Engine(ctx.target_runner, EagleProposer(ctx, k=2, checkpoint=str(ckpt)), Verifier(SamplingParams(), "cpu"),
                    max_new_tokens=5, eos_ids=set(), device=torch.device("cpu"))
    rows, _ = engine.generate([[1, 2, 3], [4, 5, 6, 7]])
    assert all(len(r.output_ids) == 5 for r in rows)


def test_medusa_trains_and_loads(tmp_path, prompts_file):
    ckpt = train(_cfg(tmp_path, prompts_file, "strategy=medusa", "strategy.num_heads=3", "train.steps=2",
                      "save_dtype=float16"))
    target = tiny("tiny-llama")
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=torch.device("cpu"))
    assert MedusaProposer(ctx, k=3, checkpoint=str(ckpt)).heads.cfg.num_heads == 3


def test_draft_model_trains_to_a_loadable_directory(tmp_path, prompts_file):
    from transformers import AutoModelForCausalLM

    out = train(_cfg(tmp_path, prompts_file, "strategy=draft_model", "strategy.num_layers=1", "train.steps=2"))
    # what draft.path=<dir> loads (a real target also saves its tokenizer there; tiny ones have none)
    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers == 1


def test_resume_without_state_and_unknown_strategy_are_config_errors(tmp_path, prompts_file):
    with pytest.raises(ConfigError, match="resume=true"):
        train(_cfg(tmp_path, prompts_file, "resume=true"))
    cfg = _cfg(tmp_path, prompts_file)
    cfg.strategy._target_ = "specbench.strategies.eagle.EagleProposer"
    with pytest.raises(ConfigError, match="no trainer"):
        train(cfg)


def test_time_budgets_and_max_shards_cut_a_run_and_say_how_to_repeat_it(tmp_path, prompts_file, capsys):
    cfg = _cfg(tmp_path, prompts_file, "strategy=medusa", "strategy.num_heads=2", "train.steps=5",
               "train.time_budget_s=0", "data.max_shards=1")
    ckpt = train(cfg)
    printed = capsys.readouterr().out
    assert "train.steps=5 train.stop_after=1" in printed and "1 of 2 shards" in printed
    assert json.loads((tmp_path / "run" / "last" / "state.json").read_text())["step"] == 1
    assert (ckpt / "model.safetensors").exists()
    # a data budget of 0 makes no new shard: the one made above is all there is to train on
    train(_cfg(tmp_path, prompts_file, "strategy=medusa", "strategy.num_heads=2", "train.steps=1", "data.time_budget_s=0",
               f"output_dir={tmp_path / 'run2'}"))
    assert "data.time_budget_s=0 reached after 1 of 2 shards" in capsys.readouterr().out
