"""specbench.train.curves: the series it draws from a metrics.jsonl (a resumed run's repeated steps, the moving
mean, the held-out points) and the PNG it writes."""

from __future__ import annotations

import json

import pytest

from specbench.errors import ConfigError
from specbench.train.curves import main, plot, read_rows, series


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_resumed_runs_repeated_steps_keep_their_last_row_and_the_mean_runs_over_the_window(tmp_path):
    metrics = _write(tmp_path / "metrics.jsonl", [
        {"step": 1, "acc_1": 0.1, "acc_2": 0.0, "loss": 9.0, "lr": 1e-4},
        {"step": 2, "acc_1": 0.3, "acc_2": 0.2, "loss": 7.0, "lr": 1e-4},
        {"step": 2, "val/acc_1": 0.25, "val/loss": 7.5},
        {"step": 3, "acc_1": 0.9, "acc_2": 0.1, "loss": 5.0},  # the run stopped here, then resumed from step 2:
        {"step": 3, "acc_1": 0.5, "acc_2": 0.4, "loss": 6.0},  # its step 3 again
        {"step": 3, "val/acc_1": 0.45, "val/loss": 6.5},
    ])
    rows = read_rows(metrics)
    assert [(r["step"], "val/acc_1" in r) for r in rows] == [(1, False), (2, False), (2, True), (3, False), (3, True)]
    got = series(rows, window=2)
    assert set(got) == {"acc_1", "acc_2", "loss", "val/acc_1", "val/loss"}  # lr is not drawn
    assert got["acc_1"][0] == [1, 2, 3]
    assert got["acc_1"][1] == pytest.approx([0.1, 0.2, 0.4])  # the mean of the last 2 rows: (0.3 + 0.5) / 2
    assert got["loss"][1] == pytest.approx([9.0, 8.0, 6.5])
    assert got["val/acc_1"] == ([2, 3], [0.25, 0.45])


def test_the_plot_is_a_png_and_a_file_without_curves_is_an_error(tmp_path, capsys):
    metrics = _write(tmp_path / "metrics.jsonl", [{"step": s, "acc_1": s / 10, "loss": 5 - s / 10} for s in range(1, 8)]
                     + [{"step": 7, "val/acc_1": 0.6, "val/loss": 4.4}])
    out = plot(metrics, tmp_path / "c.png", window=3)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    main([str(tmp_path)])  # a run directory: curves.png beside its metrics.jsonl
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"curves: {tmp_path / 'curves.png'}" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="holds no acc_<j> or loss rows"):
        plot(_write(tmp_path / "other.jsonl", [{"step": 1, "lr": 0.1}]), tmp_path / "d.png")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing")])
    assert "no metrics.jsonl there" in capsys.readouterr().err


def test_a_run_shorter_than_its_log_interval_plots_its_held_out_points_without_a_warning(tmp_path, monkeypatch):
    """A run of fewer steps than train.log_every logs only its validation rows: each unrolled step's held-out points
    are drawn, and matplotlib is not asked for a legend of nothing (it warned 'No artists with labels')."""
    import warnings

    from matplotlib.axes import Axes

    drawn = []
    real = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda self, *a, **k: drawn.append(k.get("label")) or real(self, *a, **k))
    metrics = _write(tmp_path / "metrics.jsonl", [{"step": 3, "val/acc_1": 0.2, "val/acc_2": 0.1, "val/loss": 9.0}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = plot(metrics, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == ["step 1, held out", "step 2, held out", "held out"]
