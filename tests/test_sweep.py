"""A real Hydra multirun: one result directory per job, a failed job does not stop the sweep,
and specbench.report turns the sweep into one table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMMON = ["target=tiny-llama", "strategy=draft_model", "draft=self", "dataset=builtin", "dataset.num_prompts=3", "max_new_tokens=6",
          "logger=none", "engine.warmup=false"]


def _sweep(tmp_path: Path, *overrides: str) -> Path:
    out = tmp_path / "multirun"
    proc = subprocess.run([sys.executable, "-m", "specbench", "-m", *overrides, *COMMON, f"hydra.sweep.dir={out}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_a_2x2_sweep_leaves_4_results_and_one_report(tmp_path: Path):
    out = _sweep(tmp_path, "strategy.k=1,2", "sampling.temperature=0,1")
    results = sorted(out.glob("*/results.json"))
    assert len(results) == 4
    als = sorted(json.loads(p.read_text())["strategy"]["acceptance_length"] for p in results)
    assert als == [2.0, 2.0, 3.0, 3.0]  # a self-draft accepts everything at T=0 and T=1
    # the sweep ended with its report (hydra.callbacks.report); python -m specbench.report makes it again
    report = (out / "report.md").read_text()
    assert len([line for line in report.partition("\n## ")[0].splitlines() if "| draft_model " in line]) == 4
    # AL by position: a self-draft's every step but the last (which max_new_tokens may cut) emits k + 1 tokens
    by_position = report.split("## AL by position in the response")[1].split("\n## ")[0]
    cells = sorted(line.split("|")[6].strip() for line in by_position.splitlines() if "| draft_model " in line)
    assert [c.split(" ")[0] for c in cells] == ["2.000", "2.000", "3.000", "3.000"]
    assert (out / "acceptance_length_vs_k.png").exists() and (out / "al_by_position.png").exists()
    (out / "report.md").unlink()
    proc = subprocess.run([sys.executable, "-m", "specbench.report", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (out / "report.md").read_text().partition("\n## ")[0]
    rows = [line for line in table.splitlines() if "| draft_model " in line]
    assert len(rows) == 4, table
    assert (out / "report.csv").read_text().count("\n") >= 5


def test_a_failed_job_does_not_stop_the_sweep(tmp_path: Path):
    out = _sweep(tmp_path, "strategy.k=0,2")  # k=0 is refused for draft_model
    errors = list(out.glob("*/error.json"))
    assert len(errors) == 1 and "strategy.k=0" in json.loads(errors[0].read_text())["error"]
    assert len(list(out.glob("*/results.json"))) == 1
    report = (out / "report.md").read_text()  # the sweep's report lists the failed job with its error
    assert "1 job directory without results.json" in report and "strategy.k=0" in report


def test_resume_skips_finished_jobs_and_reruns_the_others(tmp_path: Path):
    out = _sweep(tmp_path, "strategy.k=1,2")
    first, second = sorted(out.glob("*/results.json"))
    finished = {**json.loads(first.read_text()), "marker": "kept"}  # a re-run would overwrite this file
    first.write_text(json.dumps(finished))
    second.unlink()  # an interrupted job, which had failed once
    (second.parent / "error.json").write_text(json.dumps({"error": "RuntimeError: killed"}))
    jobs = sorted(p.name for p in out.iterdir() if p.is_dir())
    _sweep(tmp_path, "strategy.k=1,2", "+resume=true")
    assert json.loads(first.read_text())["marker"] == "kept"
    assert json.loads(second.read_text())["run"]["k"] == 2 and not (second.parent / "error.json").exists()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == jobs  # the same job directories, no new ones


def test_a_long_override_list_gets_a_short_job_directory(tmp_path: Path):
    """A job directory name is Hydra's override list; past 255 bytes the sweep died before its first job (H200,
    2026-12-01). Long names keep their start plus a hash of the whole, so a resumed sweep finds them again."""
    from specbench.config import JOB_DIR_BYTES, job_dirname

    long = ",".join(f"strategy.one_extra_forward_pass=false,setting_{i}=value_{i}" for i in range(8))
    assert len(job_dirname(long).encode()) <= JOB_DIR_BYTES and job_dirname(long) == job_dirname(long)
    assert job_dirname(long) != job_dirname(long + "x") and job_dirname("k=3") == "k=3"
    assert job_dirname("strategy.checkpoint=/tmp/h,k=3") == "strategy.checkpoint=_tmp_h,k=3"  # one directory per job
    out = _sweep(tmp_path, "strategy.k=1,2", "strategy.one_extra_forward_pass=true",
                 "strategy.drop_first_drafted_tokens=true", "sampling.top_p=0.999999", "sampling.top_k=100000",
                 "max_model_len=123456", "engine.triton_verify=false", "engine.batch_invariant=false")
    dirs = sorted(p for p in out.iterdir() if (p / "results.json").is_file())
    assert len(dirs) == 2 and all(len(p.name.encode()) <= JOB_DIR_BYTES + 8 for p in dirs)
