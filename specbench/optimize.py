"""The settings optimizer's side of a job (`-m hydra/sweeper=specbench_optuna`): which sweeper optimizes, and the
checks that stop a study before its first trial when every trial would fail or mislead. What a job returns to the
sweeper is specbench.metrics.objective of its results (see specbench/__main__.py)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from specbench.errors import ConfigError, unknown
from specbench.metrics import NEEDS_BASELINE, OBJECTIVES


def optimizer_config() -> Any:
    """The sweeper's config when it optimizes main()'s return value (any sweeper but Hydra's basic one), else None."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    if not str(hc.mode).endswith("MULTIRUN") or str(hc.sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    return hc.sweeper


def check_objective(cfg: DictConfig, optimizer: Any) -> None:
    """ConfigError for what would make every trial of an optimizing sweep fail or mislead: an unknown objective
    (refused in any run), a direction other than maximize, a speedup objective without the baseline."""
    name = cfg.get("objective", "speedup")
    if name not in OBJECTIVES:
        raise unknown("objective", name, OBJECTIVES)
    if optimizer is None:
        return
    direction = optimizer.get("direction", "maximize")
    direction = getattr(direction, "name", direction)  # Optuna's Direction enum or its name
    if direction != "maximize":
        raise ConfigError(f"hydra.sweeper.direction={direction!r}; allowed: maximize (objective={name} is better when "
                          f"higher). Use hydra/sweeper=specbench_optuna, or add hydra.sweeper.direction=maximize")
    if name in NEEDS_BASELINE and not cfg.get("baseline", True):
        raise ConfigError(f"objective={name} is measured against the baseline, and baseline=false; allowed: baseline=true, "
                          f"or objective=acceptance_length / al_per_draft_forward")


def raise_if_no_draft_forward(cfg: DictConfig) -> None:
    """al_per_draft_forward divides by the draft forwards per step: a lookup strategy (ngram, none) has none."""
    from specbench.config import target_class
    from specbench.strategies.base import Proposer

    if cfg.get("objective") != "al_per_draft_forward":
        return
    cls = target_class(cfg.strategy, "strategy", Proposer)
    if cls.drafting == "lookup":
        raise ConfigError(f"objective=al_per_draft_forward divides by the draft forwards per step, and strategy "
                          f"{cfg.strategy.get('name')!r} drafts without a forward; allowed: a strategy with a draft "
                          f"forward, or objective=speedup / acceptance_length")


if __name__ == "__main__":  # a library module: say what runs a study instead of exiting without a word
    import sys

    print("specbench.optimize holds the settings optimizer's checks; it is not a command. A study runs as a sweep:\n"
          "  python -m specbench -m hydra/sweeper=specbench_optuna strategy=ngram 'strategy.k=int(interval(1,6))'\n"
          "(pip install -e \".[optuna]\"; the README's Usage section, 'settings optimizer')", file=sys.stderr)
    sys.exit(2)
