"""Target-only decoding in the same engine: K = 0, one target token per step.

`strategy.k` is accepted and ignored (any integer >= 0), so that one sweep can cross every strategy
with several k (`-m strategy=none,draft_model strategy.k=1,3`); results record k = 0. So is
`strategy.tree=topk` with its top_k (a tree of no nodes); tree=dynamic is refused, as for every
lookup strategy.

Every speedup specbench reports is measured against this strategy on the same prompts in the same
process, so that engine overheads cancel and only drafting is compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from specbench.errors import ConfigError
from specbench.strategies.base import BuildContext, DecodeState, Proposer


class TargetOnly(Proposer):
    drafting = "lookup"  # an empty draft, without a model

    def __init__(self, ctx: BuildContext, k: int = 0, name: str = "none", **options: Any) -> None:
        super().__init__(ctx, 0, name, **options)

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        k = cfg.get("k", 0)
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
            raise ConfigError(f"strategy.k={k!r} for strategy 'none'; allowed: an integer >= 0 (it drafts nothing; "
                              f"k is ignored so that sweeps can cross strategies with k)")
        cls.raise_if_bad_tree(cfg.get("name", "none"), cfg.get("tree", "chain"), cfg.get("top_k", 1),
                              cfg.get("num_nodes", 0))

    def lookup(self, state: DecodeState) -> torch.Tensor:
        return torch.empty((state.batch_size, 0), dtype=torch.long, device=self.device)
