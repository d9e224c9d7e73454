"""A drafter run's training curves: top-1 agreement with the target at each unrolled step and the loss, over the
training batches (a moving mean) and on the held-out sequences, against the step. `specbench.train` writes them
beside metrics.jsonl as curves.png when it ends; for any run's metrics.jsonl:

    python -m specbench.train.curves <run dir or its metrics.jsonl> [--window 20]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from specbench.errors import ConfigError

Series = tuple[list[int], list[float]]


def _held_out(row: dict) -> bool:
    """A validation row (its metrics are "val/<name>"), not a training one."""
    return any(k.startswith("val/") for k in row)


def read_rows(path: Path) -> list[dict]:
    """metrics.jsonl's rows in step order; where a resumed run logged a step again, its last row for each kind
    (training or held out) is kept."""
    latest: dict[tuple[int, bool], dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            latest[(int(row["step"]), _held_out(row))] = row
    return [latest[key] for key in sorted(latest)]


def series(rows: list[dict], window: int) -> dict[str, Series]:
    """{name: (steps, values)}: every `acc_<j>` and `loss` of the training rows as a moving mean over the last
    `window` logged rows, and the held-out rows' `val/acc_<j>` and `val/loss` as logged."""
    out: dict[str, Series] = {}
    train = [r for r in rows if not _held_out(r)]
    for name in sorted({k for r in train for k in r if re.fullmatch(r"acc_\d+|loss", k)}):
        steps, values, recent = [], [], []
        for r in train:
            if name in r:
                recent = (recent + [r[name]])[-window:]
                steps.append(int(r["step"]))
                values.append(sum(recent) / len(recent))
        out[name] = (steps, values)
    held = [r for r in rows if _held_out(r)]
    for name in sorted({k for r in held for k in r if re.fullmatch(r"val/(acc_\d+|loss)", k)}):
        pairs = [(int(r["step"]), r[name]) for r in held if name in r]
        out[name] = ([s for s, _ in pairs], [v for _, v in pairs])
    return out


def plot(metrics: Path, out: Path, window: int = 20) -> Path:
    """curves.png of a run's metrics.jsonl: agreement (left) and loss (right), training solid, held out dashed."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state, renders with Agg

    curves = series(read_rows(metrics), window)
    if not curves:
        raise ConfigError(f"{metrics} holds no acc_<j> or loss rows to plot")
    fig = Figure(figsize=(11, 4))
    agree, loss = fig.subplots(1, 2)
    # a step's curves, training or held out, whichever the run logged (a run of under log_every steps has only the
    # held-out rows)
    steps = sorted({n.removeprefix("val/") for n in curves if n.removeprefix("val/").startswith("acc_")})
    for j, name in enumerate(steps):
        color = f"C{j}"
        if name in curves:
            agree.plot(*curves[name], color=color, label=f"step {name[4:]}, training")
        if f"val/{name}" in curves:
            agree.plot(*curves[f"val/{name}"], color=color, linestyle="--", marker="o", markersize=3,
                       label=f"step {name[4:]}, held out")
    agree.set(xlabel="training step", ylabel="top-1 agreement with the target",
              title="agreement at each unrolled step")
    if steps:
        agree.legend(fontsize=7)
    for name, style in (("loss", "-"), ("val/loss", "--")):
        if name in curves:
            loss.plot(*curves[name], color="C0", linestyle=style,
                      label="held out" if name.startswith("val/") else "training")
    loss.set(xlabel="training step", ylabel="loss", title="loss")
    if "loss" in curves or "val/loss" in curves:
        loss.legend(fontsize=7)
        loss.set_yscale("log")
    fig.suptitle(f"{metrics.parent.name}: training curves are a moving mean of the last {window} logged rows",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specbench.train.curves",
                                 description="Plot a drafter run's agreement and loss curves from its metrics.jsonl.")
    ap.add_argument("run", type=Path, help="the run's output directory, or its metrics.jsonl")
    ap.add_argument("--window", type=int, default=20, help="logged training rows in the moving mean (default 20)")
    ap.add_argument("--out", type=Path, default=None, help="the PNG to write (default: curves.png beside metrics.jsonl)")
    a = ap.parse_args(argv)
    metrics = a.run / "metrics.jsonl" if a.run.is_dir() else a.run
    if not metrics.is_file():
        ap.error(f"{a.run}: no metrics.jsonl there (give a specbench.train output directory or the file)")
    if a.window < 1:
        ap.error(f"--window {a.window}: must be at least 1")
    print(f"curves: {plot(metrics, a.out or metrics.with_name('curves.png'), a.window)}")


if __name__ == "__main__":
    main()
