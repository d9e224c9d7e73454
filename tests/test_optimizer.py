"""The settings optimizer: main() returns the job's objective, an Optuna study (hydra-optuna-sweeper, the real
plugin) maximizes it over real jobs, a failed trial does not stop it, and specbench.report names the best settings.

A self-draft makes the objective exact: at T=0 it accepts every draft, so acceptance_length = k + 1 and the
best trial is the one with the largest k the sampler tried.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from specbench.errors import ConfigError
from specbench.metrics import OBJECTIVES, objective

SELF_DRAFT = ["target=tiny-llama", "strategy=draft_model", "draft=self", "dataset=builtin", "dataset.num_prompts=2",
              "max_new_tokens=6", "logger=none", "engine.warmup=false"]


def _results(speedup: float | None = 1.5, whole_batch: float | None = 1.25, al: float = 2.5, forwards: float | None = 2.0):
    return {"run": {}, "strategy": {"acceptance_length": al, "draft_forwards_per_step": forwards},
            "speedup": None if speedup is None else {"speedup": speedup, "whole_batch": whole_batch}}


def test_each_objective_is_read_from_results():
    r = _results()
    assert {name: objective(r, name) for name in OBJECTIVES} == {
        "speedup": 1.5, "whole_batch_speedup": 1.25, "acceptance_length": 2.5, "al_per_draft_forward": 1.25}
    no_baseline = _results(speedup=None)  # baseline=false: no speedup, AL still there
    assert objective(no_baseline, "speedup") is None and objective(no_baseline, "acceptance_length") == 2.5
    assert objective(_results(forwards=0.0), "al_per_draft_forward") is None  # a lookup strategy: no draft forward
    assert objective(_results(speedup=float("nan")), "speedup") is None  # never NaN: that would stop an Optuna study
    with pytest.raises(ConfigError, match=r"unknown objective 'tpot'; allowed: acceptance_length, al_per_draft_forward, "
                                          r"speedup, whole_batch_speedup"):
        objective(r, "tpot")


def test_the_objective_setting_is_validated_before_any_model_loads(tmp_path: Path):
    from hydra import compose, initialize_config_dir

    from specbench.config import CONF_DIR, run_config

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*SELF_DRAFT, "objective=tpot"])
    with pytest.raises(ConfigError, match="unknown objective 'tpot'; allowed: acceptance_length"):
        run_config(cfg)
    proc = subprocess.run([sys.executable, "-m", "specbench", *SELF_DRAFT, "objective=tpot", f"hydra.run.dir={tmp_path}/run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "specbench: configuration error: unknown objective 'tpot'" in proc.stderr
    assert not list(tmp_path.rglob("results.json"))


def test_an_optimizer_must_maximize_and_have_what_the_objective_needs():
    from specbench.optimize import check_objective

    cfg = OmegaConf.create({"objective": "speedup", "baseline": True})
    check_objective(cfg, None)  # a single run or a basic sweep: the value is not used
    check_objective(cfg, OmegaConf.create({"direction": "maximize"}))
    with pytest.raises(ConfigError, match=r"hydra.sweeper.direction='minimize'; allowed: maximize"):
        check_objective(cfg, OmegaConf.create({"direction": "minimize"}))  # hydra/sweeper=optuna's default
    with pytest.raises(ConfigError, match="objective=speedup is measured against the baseline, and baseline=false"):
        check_objective(OmegaConf.create({"objective": "speedup", "baseline": False}), OmegaConf.create({"direction": "maximize"}))
    check_objective(OmegaConf.create({"objective": "acceptance_length", "baseline": False}), OmegaConf.create({}))


def test_al_per_draft_forward_refuses_a_strategy_without_a_draft_forward():
    from hydra import compose, initialize_config_dir

    from specbench.optimize import raise_if_no_draft_forward
    from specbench.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        ngram = compose(config_name="config", overrides=["strategy=ngram", "objective=al_per_draft_forward"])
        chain = compose(config_name="config", overrides=[*SELF_DRAFT, "objective=al_per_draft_forward"])
    with pytest.raises(ConfigError, match="strategy 'ngram' drafts without a forward; allowed: a strategy with a draft forward"):
        raise_if_no_draft_forward(ngram)  # a trial's own setting (strategy may be searched): that trial fails
    raise_if_no_draft_forward(chain)


# --- the real plugin ----------------------------------------------------------------------------


def _study(out: Path, *overrides: str, sweeper: str = "specbench_optuna") -> subprocess.CompletedProcess:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="pip install 'specbench[optuna]'")
    return subprocess.run([sys.executable, "-m", "specbench", "-m", f"hydra/sweeper={sweeper}", *SELF_DRAFT,
                           "hydra.sweeper.sampler.seed=0", *overrides, f"hydra.sweep.dir={out}"],
                          capture_output=True, text=True, timeout=600)


def _report(out: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "specbench.report", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_an_optuna_study_finds_the_best_settings_and_the_report_names_them(tmp_path: Path):
    out = tmp_path / "study"
    proc = _study(out, "objective=acceptance_length", "strategy.k=int(interval(1,4))", "hydra.sweeper.n_trials=5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(jobs) == 5 and all((j / "results.json").is_file() for j in jobs)
    ks = [json.loads((j / "results.json").read_text())["run"]["k"] for j in jobs]
    als = [json.loads((j / "results.json").read_text())["strategy"]["acceptance_length"] for j in jobs]
    assert als == [k + 1.0 for k in ks]  # a self-draft accepts everything
    best = yaml.safe_load((out / "optimization_results.yaml").read_text())
    assert best == {"name": "optuna", "best_params": {"strategy.k": max(ks)}, "best_value": max(ks) + 1.0}  # main()'s return

    text = _report(out)
    winner = next(j.name.split("_")[0] for j in jobs if json.loads((j / "results.json").read_text())["run"]["k"] == max(ks))
    assert f"## Optuna study: {out}" in text
    assert "Maximizes `acceptance_length` (AL = 1 + accepted / drafts) over strategy.k: 5 trials asked, 5 finished." in text
    assert f"**Best settings** (optimization_results.yaml): `strategy.k={max(ks)}`, acceptance_length = {max(ks) + 1} (job {winner}" in text
    assert f"| 1    | {winner}   | {max(ks)}          | {max(ks) + 1}" in text  # ranked first in the trials' table
    assert re.search(r"That job: acceptance length [\d.]+, speedup [\d.]+ \(95% interval over prompts [\d.]+-[\d.]+; "
                     r"per prompt: median", text)
    assert "never started" not in text and "Jobs that never started are not listed" not in text  # no grid to expand

    # a study cut short: no optimization_results.yaml, one trial never started; the best so far is still named
    (out / "optimization_results.yaml").unlink()
    shutil.rmtree(next(j for j in jobs if not j.name.startswith(f"{winner}_")))
    text = _report(out)
    assert "5 trials asked, 4 finished, 1 never started." in text
    assert f"The study did not end (no optimization_results.yaml). **Best settings so far**: `strategy.k={max(ks)}`" in text


def test_a_failed_trial_does_not_stop_the_study(tmp_path: Path):
    out = tmp_path / "study"
    proc = _study(out, "objective=acceptance_length", "strategy.k=choice(0,2)", "hydra.sweeper.n_trials=4")  # k=0: refused
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = list(out.glob("*/error.json"))
    assert errors and all("strategy.k=0" in json.loads(e.read_text())["error"] for e in errors)
    assert len(list(out.glob("*/results.json"))) == 4 - len(errors) > 0
    assert "Return value must be float-castable. Got 'None'" in proc.stdout + proc.stderr  # the plugin: trial FAIL
    assert yaml.safe_load((out / "optimization_results.yaml").read_text())["best_params"] == {"strategy.k": 2}
    assert f"4 trials asked, {4 - len(errors)} finished, {len(errors)} failed." in _report(out)


def test_resume_replays_a_seeded_study_and_skips_its_finished_trials(tmp_path: Path):
    out = tmp_path / "study"
    args = ("objective=acceptance_length", "strategy.k=int(interval(1,4))", "hydra.sweeper.n_trials=3")
    assert _study(out, *args).returncode == 0
    dirs, best = sorted(p.name for p in out.iterdir() if p.is_dir()), (out / "optimization_results.yaml").read_text()
    again = _study(out, *args, "+resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("skipped (resume=true)") == 3  # each returned its recorded objective: the same proposals
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == dirs and (out / "optimization_results.yaml").read_text() == best


def test_a_minimizing_sweeper_stops_before_its_first_job(tmp_path: Path):
    proc = _study(tmp_path / "study", sweeper="optuna")  # the plugin's own default direction is minimize
    assert proc.returncode != 0
    assert "specbench: configuration error: hydra.sweeper.direction='minimize'; allowed: maximize" in proc.stderr
    assert not list(tmp_path.rglob("results.json"))
