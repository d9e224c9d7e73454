"""specbench.report: tables and plots over a sweep, robust to crashed jobs and bad files.

The grid test uses fake results.json files (hand-written numbers in the schema run() writes);
the end-to-end test runs a real 2-job Hydra multirun of the ngram strategy on a tiny random model.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbench.report import build_report, by_position, main


def _fake_summary(al: float, k: int, tpot: float) -> dict:
    drafts = 10 if k else 0
    return {"n_prompts": 4, "output_tokens": 64, "drafts": drafts, "draft_tokens": drafts * k,
            "accepted_tokens": round((al - 1) * drafts), "acceptance_length": al,
            "acceptance_rate": (al - 1) / k if k else None,
            "per_position_acceptance": [max(0.0, (al - 1) / k - 0.1 * i) for i in range(k)],
            "tpot_ms": {"mean": tpot, "median": tpot, "p90": tpot, "n": 4}}


def fake_results(strategy: str, k: int, temperature: float, al: float, speedup: float) -> dict:
    """A results.json with made-up numbers, in the schema of specbench.run (only what the report reads)."""
    base, strat = _fake_summary(1.0, 0, 10.0), _fake_summary(al, k, 10.0 / speedup)
    by_category = {cat: {"baseline": _fake_summary(1.0, 0, 10.0), "strategy": _fake_summary(al + d, k, 10.0 / (speedup + d)),
                         "speedup": {"speedup": speedup + d}} for cat, d in (("coding", 0.25), ("writing", -0.25))}
    return {
        "run": {"strategy": strategy, "k": k, "target": "fake-target", "draft": "fake-draft", "dataset": "fake-set",
                "n_prompts": 4, "max_new_tokens": 16, "batch_size": 1, "temperature": temperature, "top_k": 0,
                "top_p": 1.0, "seed": 0, "dtype": "float32", "lossless": True},
        "config": {"strategy": {"_target_": "x.Fake", "name": strategy, "k": k, "num_layers": 7}},
        "environment": {},
        "baseline": base,
        "strategy": strat,
        "speedup": {"speedup": speedup, "per_prompt": {"mean": speedup, "median": speedup, "p90": speedup, "n": 4}},
        "exact_match": {"equal": 4, "n": 4, "all_equal": True, "first_mismatch_index": None} if temperature == 0 else None,
        "by_category": by_category,
    }


def _fake_sweep(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("fake: true\n")
    grid = [(1, 0.0, 1.8, 1.3), (3, 0.0, 2.6, 1.7), (1, 1.0, 1.6, 1.2), (3, 1.0, 2.2, 1.5)]  # k x temperature
    for i, (k, temp, al, sp) in enumerate(grid):
        job = root / f"{i}_strategy.k={k},sampling.temperature={temp}"
        (job / ".hydra").mkdir(parents=True)
        (job / "results.json").write_text(json.dumps(fake_results("fake_skip", k, temp, al, sp)))
    (root / "4_strategy.k=5/.hydra").mkdir(parents=True)  # a crashed job: Hydra made its directory, run() never finished
    (root / "5_broken/.hydra").mkdir(parents=True)
    (root / "5_broken/results.json").write_text('{"run": {"strategy": ')  # truncated


def test_fake_grid_table_csv_plots_and_missing_jobs(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    out = sweep / "report"  # inside the sweep: not mistaken for a crashed job
    _fake_sweep(sweep)
    assert main([str(sweep), "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    with open(out / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    assert [(r["k"], r["temperature"], r["acceptance_length"], r["speedup"]) for r in rows] == [
        ("1", "0.0", "1.8", "1.3"), ("3", "0.0", "2.6", "1.7"), ("1", "1.0", "1.6", "1.2"), ("3", "1.0", "2.2", "1.5")]
    assert rows[0]["exact_match"] == "4/4" and rows[2]["exact_match"] == ""
    assert rows[0]["settings"] == "num_layers=7" and rows[0]["job"] == "0"
    assert float(rows[1]["tpot_strategy_ms"]) == 10.0 / 1.7 and rows[1]["tpot_baseline_ms"] == "10.0"

    md = (out / "report.md").read_text()
    table = md.split("\n\n")[1].splitlines()
    assert len(table) == 2 + 4  # header, rule, four jobs
    assert "1 job directory without results.json" in md and "4_strategy.k=5" in md
    assert "1 unreadable" in md and "5_broken" in md
    assert "## Acceptance length by category" in md and "coding" in md and "writing" in md
    assert md.strip() in printed
    with open(out / "report_by_category.csv") as f:
        cats = list(csv.DictReader(f))
    assert len(cats) == 8 and {c["category"] for c in cats} == {"coding", "writing"}

    for name in ("acceptance_length_vs_k.png", "speedup_vs_k.png", "per_position_acceptance.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_default_out_dir_and_nothing_found(tmp_path, capsys):
    (tmp_path / "crashed" / ".hydra").mkdir(parents=True)
    assert main([str(tmp_path)]) == 1  # no results at all: say so, exit non-zero, still write the (empty) report
    assert "No results.json found" in capsys.readouterr().out
    assert (tmp_path / "report.md").exists() and (tmp_path / "report.csv").read_text().startswith("job,strategy")
    files = build_report([tmp_path])
    assert files.plots == [] and [p.name for p in files.collected.missing] == ["crashed"]


def test_end_to_end_ngram_sweep_then_report(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "specbench", "-m", "strategy=ngram", "strategy.k=1,2", "target=tiny-llama",
           "draft=tiny-llama", "dataset=builtin", "dataset.num_prompts=3", "max_new_tokens=8", "logger=none",
           f"hydra.sweep.dir={sweep}"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    files = build_report([sweep])
    assert files.out_dir == sweep and not files.collected.missing and not files.collected.unreadable
    rows = [j.row for j in files.collected.jobs]
    assert [(r["strategy"], r["k"], r["exact_match"], r["n_prompts"]) for r in rows] == [("ngram", 1, "3/3", 3), ("ngram", 2, "3/3", 3)]
    assert all(r["speedup"] is not None and r["acceptance_length"] >= 1 for r in rows)
    assert [p.name for p in files.plots] == ["acceptance_length_vs_k.png", "speedup_vs_k.png",
                                             "per_position_acceptance.png", "al_by_position.png"]
    # each step's tokens, as the real run wrote them, add up to its output (less the prefill's token), and AL by
    # position counts every step but each prompt's last
    for job in files.collected.jobs:
        lines = [json.loads(line) for line in (job.path / "outputs.jsonl").read_text().splitlines()]
        assert all(1 + sum(r["metrics"]["tokens_per_step"]) == len(r["output_token_ids"]) for r in lines)
        steps = sum(len(r["metrics"]["tokens_per_step"]) - 1 for r in lines)
        assert "## AL by position in the response" in files.text
        assert [s["steps"] for _, stretches in by_position([job]) for s in stretches] == [steps]


def test_jobs_without_a_baseline_are_matched_against_the_none_job(tmp_path, monkeypatch):
    """... and the report reads each job's outputs file once, for the match and for the tables after it."""
    from specbench import report

    reads: list[Path] = []
    monkeypatch.setattr(report, "outputs_rows", lambda d, read=report.outputs_rows: reads.append(d) or read(d))

    def job(name: str, strategy: str, k: int, temperature: float, outputs: dict[str, list[int]], **run) -> None:
        results = fake_results(strategy, k, temperature, 1.0 + k / 2, 1.0)
        results["exact_match"], results["baseline"], results["speedup"] = None, None, None  # baseline=false
        results["run"].update(run)
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
        rows = [{"prompt_id": pid, "output_token_ids": ids} for pid, ids in outputs.items()]
        (tmp_path / name / "outputs.jsonl").write_text("\n".join(json.dumps(r) for r in rows))

    reference = {"p/0": [5, 6, 7], "p/1": [8, 9], "p/2": [1]}
    job("none", "none", 0, 0.0, reference)
    job("eagle", "eagle", 3, 0.0, {**reference, "p/1": [8, 4]})  # one prompt differs
    job("eagle_t1", "eagle", 3, 1.0, {**reference, "p/1": [8, 4]})  # T > 0: no exact match is claimed
    job("other_set", "eagle", 3, 0.0, reference, dataset="another-set")  # no none job with these prompts
    rows = {j.label: j.row for j in build_report([tmp_path], tmp_path / "out").collected.jobs}
    assert rows["eagle"]["exact_match"] == "2/3 vs none"
    assert rows["eagle_t1"]["exact_match"] is None and rows["other_set"]["exact_match"] is None
    assert rows["none"]["exact_match"] is None
    assert tmp_path / "eagle" in reads and len(reads) == len(set(reads))


def test_jobs_that_never_started_are_listed_from_multirun_yaml(tmp_path):
    """An interrupted sweep: multirun.yaml names 2 x 2 jobs; one finished, one failed, two never started."""
    import yaml

    from specbench.report import sweep_jobs

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    hydra = {"sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "max_batch_size": None,
                         "params": {"sampling.temperature": "0,1"}},
             "overrides": {"task": ["strategy.k=1,3", "dataset=builtin"]}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra, "strategy": {"k": 3}}))
    jobs = sweep_jobs(sweep / "multirun.yaml")  # params first, then the command line, as Hydra's basic sweeper orders them
    assert jobs == [["sampling.temperature=0", "strategy.k=1", "dataset=builtin"], ["sampling.temperature=0", "strategy.k=3", "dataset=builtin"],
                    ["sampling.temperature=1", "strategy.k=1", "dataset=builtin"], ["sampling.temperature=1", "strategy.k=3", "dataset=builtin"]]

    def job_dir(num: int, overrides: list[str]):
        d = sweep / f"{num}_{','.join(sorted(overrides))}"
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        return d

    done = job_dir(0, [*jobs[0], "+resume=true"])  # a resumed run's job: `resume` does not make it another job
    (done / "results.json").write_text(json.dumps(fake_results("fake_skip", 1, 0.0, 1.8, 1.3)))
    failed = job_dir(2, jobs[2])
    (failed / "error.json").write_text(json.dumps({"error": "ConfigError: strategy.k=1 was refused", "traceback": "..."}))
    files = build_report([sweep])
    assert [(i, job) for _, i, job in files.collected.never_started] == [(1, jobs[1]), (3, jobs[3])]
    md = files.text
    assert "1 job directory without results.json" in md and "(failed: ConfigError: strategy.k=1 was refused)" in md
    assert "2 jobs of the sweep never started" in md
    assert f"- {sweep} job 1: sampling.temperature=0 strategy.k=3 dataset=builtin" in md
    assert "+resume=true" in md


def test_a_sweep_whose_jobs_cannot_be_derived_says_so(tmp_path):
    import yaml

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": {"_target_": "hydra_plugins.optuna.OptunaSweeper"}}}))
    files = build_report([sweep])
    assert not files.collected.never_started and "only the basic sweeper's job list is derived" in files.text


def test_tree_columns_show_when_the_tree_differs(tmp_path):
    """nodes_per_step and AL per verified token are report.md columns only where jobs differ in them (a sweep of
    tree settings); report.csv always holds them, and verify ms per step."""
    root = tmp_path / "trees"
    for i, (nodes, al, verify_ms) in enumerate([(3, 1.6, 45.0), (8, 2.0, 85.0), (16, 2.1, 95.0)]):
        r = fake_results("eagle", 3, 0.0, al, 1.0)
        r["strategy"].update(nodes_per_step=float(nodes), al_per_verified_token=al / (nodes + 1),
                             verify_ms_per_step=verify_ms)
        job = root / f"{i}_job"
        (job / ".hydra").mkdir(parents=True)
        (job / "results.json").write_text(json.dumps(r))
    assert main([str(root), "--out", str(tmp_path / "out")]) == 0
    header = (tmp_path / "out" / "report.md").read_text().split("\n\n")[1].splitlines()[0]
    assert "nodes_per_step" in header and "al_per_verified_token" in header and "verify_ms_per_step" not in header
    with open(tmp_path / "out" / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["nodes_per_step"], r["verify_ms_per_step"]) for r in rows] == [("3.0", "45.0"), ("8.0", "85.0"), ("16.0", "95.0")]

    chain = tmp_path / "chain"
    _fake_sweep(chain)  # results without tree metrics (older runs): no tree columns
    assert main([str(chain), "--out", str(tmp_path / "out2")]) == 0
    assert "nodes_per_step" not in (tmp_path / "out2" / "report.md").read_text().split("\n\n")[1]


def test_mean_k_shows_when_it_differs_and_the_histogram_is_in_the_csv(tmp_path):
    """Adaptive K: mean K drafted per step is a report.md column where jobs differ in it (fixed k vs a schedule),
    and report.csv holds it and the accepted-count histogram of every job."""
    root = tmp_path / "adaptive"
    for i, (mean_k, hist) in enumerate([(3.0, [4, 3, 2, 1]), (1.75, [2, 5, 1, 0])]):
        r = fake_results("eagle", 3, 0.0, 1.8, 1.0)
        r["strategy"].update(mean_k=mean_k, accepted_histogram=hist)
        job = root / f"{i}_job"
        (job / ".hydra").mkdir(parents=True)
        (job / "results.json").write_text(json.dumps(r))
    assert main([str(root), "--out", str(tmp_path / "out")]) == 0
    header = (tmp_path / "out" / "report.md").read_text().split("\n\n")[1].splitlines()[0]
    assert "mean_k" in header and "accepted_histogram" not in header
    with open(tmp_path / "out" / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["mean_k"], r["accepted_histogram"]) for r in rows] == [("3.0", "4 3 2 1"), ("1.75", "2 5 1 0")]

    same = tmp_path / "same"
    for i in range(2):
        r = fake_results("eagle", 3, 0.0, 1.8 + i / 10, 1.0)
        r["strategy"].update(mean_k=3.0, accepted_histogram=[1, 1, 1, 1])
        (same / f"{i}_job" / ".hydra").mkdir(parents=True)
        (same / f"{i}_job" / "results.json").write_text(json.dumps(r))
    assert main([str(same), "--out", str(tmp_path / "out2")]) == 0
    assert "mean_k" not in (tmp_path / "out2" / "report.md").read_text().split("\n\n")[1].splitlines()[0]


def test_plot_series_name_only_the_settings_that_tell_a_strategys_jobs_apart():
    """Legends stay short: eagle's chain and tree jobs differ in tree/top_k (shown); settings every job of a strategy
    shares (its checkpoint) are left out; a strategy whose jobs share all settings is its name alone."""
    from types import SimpleNamespace

    from specbench.report import _grouped

    def job(strategy: str, settings: str) -> SimpleNamespace:
        return SimpleNamespace(row={"strategy": strategy, "settings": settings, "dataset": "mt-bench",
                                    "temperature": 0.0, "target": "t", "draft": "", "top_k": 0, "top_p": 1.0,
                                    "batch_size": 1})

    jobs = [job("eagle", "checkpoint=auto top_k=1 tree=chain"), job("eagle", "checkpoint=auto top_k=4 tree=dynamic"),
            job("ngram", "min_n=1 max_n=3"), job("ngram", "min_n=1 max_n=3"), job("suffix", "max_depth=8 tree=None")]
    series = sorted(_grouped(jobs)[("mt-bench", 0.0)])
    assert series == ["eagle (top_k=1 tree=chain)", "eagle (top_k=4 tree=dynamic)", "ngram", "suffix"]


def test_a_row_holds_the_scheduler_and_the_whole_run_figures():
    """Continuous batching's figures reach the report: the scheduler, whole-run tok/s, ITL p50/p99, whole-batch
    speedup; a results.json written before the scheduler existed reads as static, its missing figures as None."""
    from specbench.report import TIMING_COLUMNS, job_row

    r = fake_results("fake_skip", 3, 0.0, 2.5, 1.4)
    r["run"]["scheduler"] = "continuous"
    r["speedup"]["whole_batch"] = 1.25
    for side, tps, itl in (("baseline", 100.0, (5.0, 9.0)), ("strategy", 125.0, (12.0, 30.0))):
        r[side]["output_tokens_per_s_overall"] = tps
        r[side]["itl_ms"] = {"mean": itl[0], "median": itl[0], "p90": itl[1], "p99": itl[1], "n": 40}
    row = job_row(r, "job")
    assert (row["scheduler"], row["speedup_whole_batch"], row["tokens_per_s_baseline"], row["tokens_per_s_strategy"],
            row["itl_baseline_ms_median"], row["itl_strategy_ms_p99"]) == ("continuous", 1.25, 100.0, 125.0, 5.0, 30.0)
    old = job_row(fake_results("fake_skip", 3, 0.0, 2.5, 1.4), "old")
    assert old["scheduler"] == "static" and old["itl_strategy_ms_p99"] is None and old["tokens_per_s_strategy"] is None
    assert {"tokens_per_s_strategy", "itl_strategy_ms_p99", "speedup_whole_batch"} <= set(TIMING_COLUMNS)


def test_a_mapping_setting_keeps_the_plots_and_the_table_shows_what_tells_jobs_apart(tmp_path):
    """The default strategy (eagle_auto) has a mapping setting, confidence_threshold={chain: 0.3, dynamic: 0.4}:
    its `key=value` text must not split inside the mapping, which failed every plot of a sweep over it. report.md's
    settings column shows only what differs between a strategy's jobs, and lists the rest once under the table;
    report.csv keeps every setting."""
    from specbench.report import _settings

    root = tmp_path / "sweep"
    for i, (k, num_nodes) in enumerate([(2, 5), (3, 5), (3, 7)]):
        r = fake_results("eagle_auto", k, 0.0, 1.5 + k / 10, 1.2)
        r["config"]["strategy"].update(confidence_threshold={"chain": 0.3, "dynamic": 0.4}, num_nodes=num_nodes,
                                       checkpoint="/a dir/with spaces")
        (root / f"{i}_job" / ".hydra").mkdir(parents=True)
        (root / f"{i}_job" / "results.json").write_text(json.dumps(r))
    files = build_report([root], tmp_path / "out")
    assert sorted(p.name for p in files.plots) == ["acceptance_length_vs_k.png", "per_position_acceptance.png",
                                                   "speedup_vs_k.png"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "failed" not in md  # "plot acceptance_length_vs_k failed: ValueError: not enough values to unpack"
    table = md.split("\n\n")[1].splitlines()
    assert [line.split("|")[3].strip() for line in table[2:]] == ["num_nodes=5", "num_nodes=5", "num_nodes=7"]
    assert ("- eagle_auto: checkpoint=/a dir/with spaces confidence_threshold={chain:0.3,dynamic:0.4} num_layers=7"
            in md)
    with open(tmp_path / "out" / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["settings"] == ("checkpoint=/a dir/with spaces confidence_threshold={chain:0.3,dynamic:0.4} "
                                   "num_layers=7 num_nodes=5")
    # a results.json's settings as older reports wrote them (a mapping's repr, with spaces) still parse whole
    assert _settings({"settings": "confidence_threshold={'chain': 0.3, 'dynamic': 0.4} top_k=2"}) == {
        "confidence_threshold": "{'chain': 0.3, 'dynamic': 0.4}", "top_k": "2"}


def test_target_only_jobs_show_no_settings(tmp_path):
    """A sweep that crosses strategies gives `none` the base settings too (k_schedule, confidence_threshold ...), which
    target-only decoding never reads: report.md lists none of them for it, under the table or in its rows."""
    root = tmp_path / "sweep"
    for i, (name, threshold) in enumerate([("none", 0.4), ("eagle", 0.3), ("eagle", 0.5)]):
        r = fake_results(name, 0 if name == "none" else 3, 0.0, 1.0 if name == "none" else 1.8, 1.0)
        r["config"]["strategy"].update(k_schedule="fixed", confidence_threshold=threshold)
        (root / f"{i}_job" / ".hydra").mkdir(parents=True)
        (root / f"{i}_job" / "results.json").write_text(json.dumps(r))
    build_report([root], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "- none:" not in md and "- eagle: k_schedule=fixed num_layers=7" in md
    table = md.split("\n\n")[1].splitlines()
    assert sorted((line.split("|")[2].strip(), line.split("|")[3].strip()) for line in table[2:]) == [
        ("eagle", "confidence_threshold=0.3"), ("eagle", "confidence_threshold=0.5"), ("none", "-")]


def test_a_missing_directory_is_an_error_that_writes_nothing(tmp_path, capsys):
    """A mistyped sweep directory is named in the error; the report is not written into a new empty directory."""
    missing = tmp_path / "multirun" / "typo"
    with pytest.raises(SystemExit) as e:
        main([str(missing)])
    assert e.value.code == 2 and f"no such directory: {missing}" in capsys.readouterr().err
    assert not missing.exists()


def test_the_intervals_reach_the_csv_and_the_plots_bars(tmp_path):
    """results.json's 95% intervals over prompts go to the CSV; a k one job ran gets a bar, a k two jobs ran (their
    mean plotted) none; results from before the intervals have neither."""
    from specbench.report import ci_bars, collect

    for name, k, ci in (("a", 1, [1.1, 1.5]), ("b", 3, [1.4, 2.0]), ("c", 3, [1.5, 1.9]), ("d", 2, None)):
        results = fake_results("fake_skip", k, 0.0, 2.0, 1.3 + 0.1 * k)
        if ci:
            results["speedup"]["ci95"] = ci
            results["strategy"]["acceptance_length_ci95"] = [1.8, 2.2]
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    jobs = collect([tmp_path]).jobs
    a = next(j for j in jobs if j.row["k"] == 1)
    assert (a.row["speedup_ci_low"], a.row["speedup_ci_high"], a.row["acceptance_length_ci_low"]) == (1.1, 1.5, 1.8)
    assert ci_bars(jobs, "speedup") == [(1, pytest.approx(1.4), 1.1, 1.5)]  # k=3 ran twice, k=2 has no interval
    assert ci_bars(jobs, "acceptance_length") == [(1, 2.0, 1.8, 2.2)]
    build_report([tmp_path])
    with open(tmp_path / "report.csv") as f:
        rows = {r["k"]: r for r in csv.DictReader(f)}
    assert rows["1"]["speedup_ci_low"] == "1.1" and rows["2"]["speedup_ci_low"] == ""


def _job_with_outputs(root: Path, name: str, counts: list[tuple[str, int, int]], k: int = 3) -> Path:
    """A job directory: fake results.json, and outputs.jsonl with these (prompt id, accepted, drafts) per prompt."""
    job = root / name
    job.mkdir(parents=True)
    al = 1 + sum(a for _, a, _ in counts) / sum(d for _, _, d in counts)
    (job / "results.json").write_text(json.dumps(fake_results("eagle", k, 0.0, al, 1.5)))
    (job / "outputs.jsonl").write_text("".join(json.dumps({"prompt_id": p, "metrics": {"accepted_tokens": a, "drafts": d}})
                                               + "\n" for p, a, d in counts))
    return job


def test_against_a_job_each_jobs_al_difference_is_paired_over_the_same_prompts(tmp_path, capsys):
    """Prompt difficulty varies tenfold and job b accepts exactly one token more a draft than a on every prompt: the
    paired interval is the difference itself; c differs on one prompt only; d ran other prompts and is not compared."""
    ids = [f"p{i}" for i in range(12)]
    a = _job_with_outputs(tmp_path, "a", [(p, 2 + 20 * (i % 2), 10) for i, p in enumerate(ids)])
    _job_with_outputs(tmp_path, "b", [(p, 12 + 20 * (i % 2), 10) for i, p in enumerate(ids)])
    _job_with_outputs(tmp_path, "c", [(p, 2 + 20 * (i % 2) + 5 * (i == 3), 10) for i, p in enumerate(ids)])
    _job_with_outputs(tmp_path, "d", [(p + "x", 3, 10) for p in ids])
    c = tmp_path / "c" / "outputs.jsonl"  # an archived sweep's outputs, compressed: read the same
    (c.parent / "outputs.jsonl.gz").write_bytes(gzip.compress(c.read_bytes()))
    c.unlink()
    assert main([str(tmp_path), "--against", str(a)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert f"## AL against {a} (AL 2.200), paired over the same prompts" in md
    row = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()
           if line.startswith("| ") and line.count("|") == 9}
    assert row["b"] == ["eagle", "3", "0", "3.200", "+1.0000", "+1.0000 to +1.0000", "12"]
    low, high = (float(x) for x in row["c"][5].split(" to "))
    # 5 tokens more over 120 drafts, on one prompt: a resample without it gains nothing, one with it 3 times 0.125
    assert row["c"][4] == "+0.0417" and low == 0.0 and 0.0417 < high <= 0.125
    assert "Not compared: d (other prompts)" in md
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--against", str(tmp_path / "nope")])
    assert "--against" in capsys.readouterr().err
