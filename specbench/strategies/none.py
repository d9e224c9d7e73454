"""Target-only decoding in the same engine: K = 0, one target token per step.

Every speedup specbench reports is measured against this strategy on the same prompts in the same
process, so that engine overheads cancel and only drafting is compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from specbench.errors import ConfigError
from specbench.strategies.base import BuildContext, DecodeState, Draft, Proposer


class TargetOnly(Proposer):
    def __init__(self, ctx: BuildContext, k: int = 0, name: str = "none", **options: Any) -> None:
        super().__init__(ctx, 0, name, **options)
        self.device = ctx.device

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        if cfg.get("k", 0) not in (0, None):
            raise ConfigError(f"strategy.k={cfg.get('k')!r} for strategy 'none'; allowed: 0 (it drafts nothing)")

    def propose(self, state: DecodeState) -> Draft:
        return Draft(tokens=torch.empty((state.batch_size, 0), dtype=torch.long, device=self.device))
