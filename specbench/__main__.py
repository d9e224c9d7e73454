"""`python -m specbench [overrides]`: a thin Hydra entry point over specbench.run.run(cfg).

In a sweep (-m), a job that fails writes error.json (the message and traceback) into its own
directory and the sweep goes on: finished jobs keep their results.json, and `specbench.report`
lists the failed ones. A single run fails loudly.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import hydra
from omegaconf import DictConfig

from specbench.errors import ConfigError


def _in_sweep() -> tuple[bool, Path | None]:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return str(hc.mode).endswith("MULTIRUN"), Path(hc.runtime.output_dir)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from specbench.run import run

    sweep, job_dir = _in_sweep()
    try:
        run(cfg)
    except Exception as e:
        if sweep and job_dir is not None:
            (job_dir / "error.json").write_text(json.dumps(
                {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}, indent=1))
            print(f"specbench: this job failed ({type(e).__name__}: {e}); the sweep goes on. See {job_dir / 'error.json'}")
            return
        if isinstance(e, ConfigError):
            raise SystemExit(f"specbench: configuration error: {e}") from None
        raise


if __name__ == "__main__":
    main()
