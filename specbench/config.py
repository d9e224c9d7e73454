"""Where the configuration is, and the one model group that serves as both `target` and `draft`.

- conf/ sits at the repository's top level; pyproject maps the package `specbench.conf` to it, so an installed
  specbench holds the same files in specbench/conf/. CONF_DIR is whichever of the two this copy has.
- conf/model/<name>.yaml is one model, usable as target or draft. Hydra takes `target=<name>` as a choice in a
  group named `target` (with `- model@target: <name>` in the defaults list it would take it as a value), so
  the ConfigStore holds target/<name> and draft/<name> for each model file, each mounting the file in its own
  package (`- /model@_here_: <name>`). conf/draft/ adds the two choices only a draft has: auto and self. A
  model yaml on your own search path is chosen with `model@target=<name>` (`model@draft=<name>` after a
  `draft=<preset>`, whose entry it overrides).
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


def _conf_dir() -> Path:
    packaged = Path(__file__).with_name("conf")  # an installed package: pyproject maps specbench.conf to conf/
    if (packaged / "config.yaml").is_file():
        return packaged
    return Path(__file__).resolve().parents[1] / "conf"  # a checkout


CONF_DIR = _conf_dir()


def options(group: str) -> list[str]:
    """The choices of a config group in conf/ (target and draft choose from conf/model/; draft adds conf/draft/)."""
    folders = {"target": ("model",), "draft": ("model", "draft")}.get(group, (group,))
    return sorted({p.stem for folder in folders for p in (CONF_DIR / folder).glob("*.yaml")})


def _register() -> None:
    cs = ConfigStore.instance()
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        for role in ("target", "draft"):
            cs.store(group=role, name=path.stem, node={"defaults": [{"/model@_here_": path.stem}]})
    # conf/train/config.yaml's hydra.searchpath: conf/ wherever this copy has it (model/ and logger/ for training)
    OmegaConf.register_new_resolver("specbench.conf_dir", lambda: str(CONF_DIR), replace=True)


_register()
