"""`python -m specbench.train [overrides]`: a thin Hydra entry point over specbench.train.loop.train(cfg)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from specbench.config import CONF_DIR
from specbench.errors import ConfigError


@hydra.main(version_base="1.3", config_path=str(CONF_DIR / "train"), config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import open_dict

    from specbench.train.loop import train

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and cfg.get("output_dir") is None:
        # each job of a sweep (train.seed=1,2 ...) in its own folder, the sweep's job folder: the default
        # outputs/train/<strategy>-<target> would hold only the last job's checkpoint
        with open_dict(cfg):
            cfg.output_dir = hc.runtime.output_dir
    try:
        train(cfg)
    except ConfigError as e:
        raise SystemExit(f"specbench.train: configuration error: {e}") from None


if __name__ == "__main__":
    main()
