"""Where the configuration is, and the one model group that serves as both `target` and `draft`.

- conf/ sits at the repository's top level; pyproject maps the package `specbench.conf` to it, so an installed
  specbench holds the same files in specbench/conf/. CONF_DIR is whichever of the two this copy has.
- conf/model/<name>.yaml is one model, usable as target or draft. Hydra takes `target=<name>` as a choice in a
  group named `target` (with `- model@target: <name>` in the defaults list it would take it as a value), so
  the ConfigStore holds target/<name> and draft/<name> for each model file, each mounting the file in its own
  package (`- /model@_here_: <name>`). conf/draft/ adds the two choices only a draft has: auto and self. A
  model yaml on your own search path is chosen with `model@target=<name>` (`model@draft=<name>` after a
  `draft=<preset>`, whose entry it overrides).
- Strategies, prompt sets and loggers are classes named by their yaml's `_target_`: target_class finds one
  without building it, build builds it with hydra.utils.instantiate.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from specbench.errors import ConfigError, unknown


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


def target_class(cfg: Mapping[str, Any], group: str, base: type) -> type:
    """The class a group option's `_target_` names, found without building it (plan() asks it about the
    settings before any model loads); a ConfigError listing the group's options when it is not there."""
    target, name = cfg.get("_target_"), cfg.get("name")
    if not target:
        raise unknown(group, name, options(group), hint=f"a {group} config needs `_target_: <{base.__name__} subclass>`")
    try:
        cls = get_class(target)
    except Exception as e:  # noqa: BLE001 - hydra wraps import errors in several types
        raise unknown(group, name or target, options(group), hint=f"could not import {target}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{group}._target_={target!r} is not a {base.__module__}.{base.__name__} subclass")
    return cls


def build(cfg: Mapping[str, Any], /, *args: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate(cfg), then called with `args` and `kwargs` as they are. Given to instantiate,
    they would be merged into the config (a dataclass such as BuildContext copied into a new one, losing
    identity), and every error the class raises would come back wrapped; a ConfigError must say what to change."""
    return instantiate(cfg, _partial_=True, _convert_="all")(*args, **kwargs)


def _register() -> None:
    cs = ConfigStore.instance()
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        for role in ("target", "draft"):
            cs.store(group=role, name=path.stem, node={"defaults": [{"/model@_here_": path.stem}]})
    # conf/train/config.yaml's hydra.searchpath: conf/ wherever this copy has it (model/ and logger/ for training)
    OmegaConf.register_new_resolver("specbench.conf_dir", lambda: str(CONF_DIR), replace=True)


_register()
