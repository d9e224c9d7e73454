"""`python -m specbench [overrides]`: a thin Hydra entry point over specbench.run.run(cfg)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from specbench.errors import ConfigError


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from specbench.run import run

    try:
        run(cfg)
    except ConfigError as e:
        raise SystemExit(f"specbench: configuration error: {e}") from None


if __name__ == "__main__":
    main()
