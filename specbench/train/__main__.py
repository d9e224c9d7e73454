"""`python -m specbench.train [overrides]`: a thin Hydra entry point over specbench.train.loop.train(cfg)."""

from __future__ import annotations

import warnings

import hydra
from omegaconf import DictConfig

from specbench.errors import ConfigError

# specbench/conf is a plain directory, not a package: hydra warns, then finds its groups all the same
warnings.filterwarnings("ignore", message=".*hydra.searchpath in main, path=specbench.conf is not available")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from specbench.train.loop import train

    try:
        train(cfg)
    except ConfigError as e:
        raise SystemExit(f"specbench.train: configuration error: {e}") from None


if __name__ == "__main__":
    main()
