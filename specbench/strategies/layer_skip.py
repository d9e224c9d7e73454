"""layer_skip: self-speculation. The target's own first L layers draft for the full model.

(Draft & Verify, Zhang et al. 2023, arXiv 2309.08168; LayerSkip, Elhoushi et al. 2024, arXiv
2404.16710: early exit at layer L, then the target's final norm and LM head.) The draft shares
every weight with the target (embedding, layers 0..L-1, final norm, LM head), so it costs no
memory for weights and needs no tokenizer or vocabulary checks; it keeps its own L-layer KV
cache. Models not trained for early exit (no LayerSkip recipe) accept less at small L.

The cache is kept exactly as draft_model keeps its own: in the first forward of a step the draft
ingests every committed token it has not yet seen (the bonus token, plus the last accepted draft
when all K were accepted) together, so a step costs K draft forwards, not K+1; rejected drafts
leave stale slots above the committed length that are never read and get overwritten. At T > 0
it samples from its own q, shaped by the same temperature / top-k / top-p as the target, and
returns q for rejection sampling.

Settings: k, num_layers (L; null = half the target's layers, rounded down; 1 <= L < the target's
depth). It needs specbench's own decoder (Llama / Qwen2 / Qwen3): transformers' forward cannot
stop early.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


from specbench.errors import ConfigError
from specbench.models.cuda_graphs import maybe_graphed
from specbench.models.decoder import SUPPORTED_ARCHS
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, Proposer


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def resolve_num_layers(num_layers: int | None, total: int) -> int:
    """The draft depth L: null means half the target's layers; anything outside 1..total-1 is refused."""
    if total < 2:
        raise ConfigError(f"layer_skip needs a target of at least 2 layers to skip one; the target has {total}")
    layers = max(1, total // 2) if num_layers is None else num_layers
    if not _is_int(layers) or not 1 <= layers < total:
        raise ConfigError(f"strategy.num_layers={num_layers!r} for strategy 'layer_skip'; allowed: an integer in "
                          f"1..{total - 1} (the target has {total} layers; the draft must skip at least one), "
                          f"or null for half ({max(1, total // 2)})")
    return layers


def raise_if_no_native_decoder(model_type: str, backend: str) -> None:
    if backend == "transformers" or model_type not in SUPPORTED_ARCHS:
        raise ConfigError(f"layer_skip with engine.backend={backend!r} on a {model_type!r} target; allowed: "
                          f"engine.backend=auto or native on a {'/'.join(sorted(SUPPORTED_ARCHS))} target (layer_skip runs "
                          f"the first L layers with specbench's own decoder; transformers' forward cannot exit early)")


class LayerSkipProposer(Proposer):
    """The base's chain loop (catch-up, K forwards, rollback by length) over the target's first L layers."""

    owns_kv_cache = True
    samples = True
    cuda_graphs = True
    drafts_with_target_weights = True

    def __init__(self, ctx: BuildContext, k: int, name: str = "layer_skip", num_layers: int | None = None,
                 **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        self.validate({"name": name, "k": k, "num_layers": num_layers})
        hf = ctx.target.model
        raise_if_no_native_decoder(hf.config.model_type, ctx.backend)
        self.num_layers = resolve_num_layers(num_layers, hf.config.num_hidden_layers)
        # shares the target's weights; its own L-layer cache
        self.runner = maybe_graphed(make_runner(hf, ctx.backend, num_layers=self.num_layers,
                                                batch_invariant=ctx.batch_invariant), self.use_graphs)

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        layers = cfg.get("num_layers")
        if layers is not None and (not _is_int(layers) or layers < 1):
            raise ConfigError(f"strategy.num_layers={layers!r} for strategy 'layer_skip'; allowed: an integer >= 1 "
                              f"and below the target's depth, or null for half the target's layers")

    @classmethod
    def validate_for_target(cls, cfg: Mapping[str, Any], target: Any, backend: str) -> None:
        """num_layers and the decoder against the target's architecture when it is known before loading
        (a preset, a local directory's config.json); run.plan calls it."""
        known = getattr(target, "known", None) or {}
        if known.get("model_type"):
            raise_if_no_native_decoder(known["model_type"], backend)
        if known.get("num_hidden_layers"):
            resolve_num_layers(cfg.get("num_layers"), known["num_hidden_layers"])
