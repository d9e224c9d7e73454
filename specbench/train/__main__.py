"""`python -m specbench.train [overrides]`: a thin Hydra entry point over specbench.train.loop.train(cfg)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from specbench.config import CONF_DIR
from specbench.errors import ConfigError


@hydra.main(version_base="1.3", config_path=str(CONF_DIR / "train"), config_name="config")
def main(cfg: DictConfig) -> None:
    from specbench.train.loop import train

    try:
        train(cfg)
    except ConfigError as e:
        raise SystemExit(f"specbench.train: configuration error: {e}") from None


if __name__ == "__main__":
    main()
