"""draft_model: a smaller causal LM drafts K tokens autoregressively.

(Leviathan et al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318.) The draft keeps its
own per-row cache. In the first forward of a step it ingests every committed token it has not yet
seen (the bonus token, plus the last accepted draft when all K were accepted) together, so a step
costs K draft forwards, not K+1 (`one_extra_forward_pass: true` runs the seed PR's K+1 instead). At
T > 0 it samples from its own distribution q, shaped by the same temperature / top-k / top-p as the
target, and returns q for rejection sampling. The loop is the proposer base's; this file only
builds the draft's runner and checks that the draft can speak for the target.

A draft of another tokenizer (`strategy.cross_tokenizer`: auto, the default, when the tokenizers differ;
uad or tli to force a rule; off refuses such a draft) is built as `CrossTokenizerProposer`
(strategies/cross_tokenizer.py): constructing DraftModelProposer picks that subclass, so the strategy
stays one yaml. A draft of the target's tokenizer takes the path above, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specbench.errors import ConfigError
from specbench.models.draft_runner import first_disagreement, make_draft_runner, raise_if_tokenizers_disagree
from specbench.strategies.base import BuildContext, Proposer, raise_if_vocab_too_large

CROSS_TOKENIZER = ("auto", "off", "uad", "tli")


class DraftModelProposer(Proposer):
    owns_kv_cache = True
    samples = True
    cuda_graphs = True
    needs_draft_model = True

    def __new__(cls, ctx: BuildContext, *args: Any, **options: Any) -> DraftModelProposer:
        if cls is DraftModelProposer and cross_rule(ctx, options.get("cross_tokenizer", "auto")) is not None:
            from specbench.strategies.cross_tokenizer import CrossTokenizerProposer

            cls = CrossTokenizerProposer  # Python then runs its __init__ with the same arguments
        return super().__new__(cls)

    def __init__(self, ctx: BuildContext, k: int, name: str = "draft_model", cross_tokenizer: str = "auto",
                 lookbehind: int = 10, **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        assert ctx.draft is not None, "run() loads the draft for strategies with needs_draft_model"
        raise_if_vocab_too_large(ctx.draft.vocab_size, ctx.target.vocab_size, ctx.draft.spec.label, ctx.target.spec.label)
        raise_if_tokenizers_disagree(ctx.draft.tokenizer, ctx.target.tokenizer, ctx.draft.spec.label, ctx.target.spec.label)
        # chosen from the DRAFT's own config: a VLM draft gets images (begin_batch), a text draft plain positions
        self.runner = make_draft_runner(ctx.draft.model, ctx.backend, graphs=self.use_graphs,
                                        batch_invariant=ctx.batch_invariant, target_vocab=ctx.target.vocab_size)

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        mode, lookbehind = cfg.get("cross_tokenizer", "auto"), cfg.get("lookbehind", 10)
        if mode not in CROSS_TOKENIZER:
            raise ConfigError(f"strategy.cross_tokenizer={mode!r} for strategy {cfg.get('name')!r}; allowed: "
                              f"{', '.join(CROSS_TOKENIZER)} (auto: uad at T=0 and tli at T>0 when the draft's tokenizer "
                              f"differs from the target's; off: refuse such a draft)")
        if not isinstance(lookbehind, int) or isinstance(lookbehind, bool) or lookbehind < 1:
            raise ConfigError(f"strategy.lookbehind={lookbehind!r} for strategy {cfg.get('name')!r}; allowed: an integer "
                              f">= 1 (committed target tokens re-tokenized for the draft at every step)")
        if mode in ("uad", "tli"):
            raise_if_cross_unsupported(cfg)

    @classmethod
    def validate_draft(cls, cfg: Mapping[str, Any], draft: Any, target: Any, greedy: bool) -> None:
        """The draft's spec against the target's, with the sampling rule, before loading (run.plan)."""
        mode = cfg.get("cross_tokenizer", "auto")
        if mode == "uad" and not greedy:
            raise ConfigError("strategy.cross_tokenizer=uad with sampling.temperature > 0: universal assisted decoding "
                              "re-encodes the draft's text and has no q for the target's tokens, so it is lossless only "
                              "at T=0; allowed at T>0: cross_tokenizer=tli (token-level intersection) or auto")
        # a larger vocabulary is refused now where the draft must share the target's ids: cross_tokenizer=off, or auto
        # with a draft of the target's tokenizer family (the same architecture, or random weights' byte stand-in).
        # Otherwise the tokenizers decide after loading (a draft of another tokenizer may have any vocabulary).
        if mode in ("off", "auto") and draft.vocab_size and target.vocab_size and (mode == "off" or _same_family(draft, target)):
            raise_if_vocab_too_large(draft.vocab_size, target.vocab_size, draft.label, target.label)


def _same_family(draft: Any, target: Any) -> bool:
    """Whether two ModelSpecs surely share a tokenizer family before loading: random weights (both get the byte
    stand-in tokenizer), or the same model_type."""
    if "random" in (draft.source, target.source):
        return True
    kind = lambda spec: (spec.known or {}).get("model_type")  # noqa: E731
    return kind(draft) is not None and kind(draft) == kind(target)


def raise_if_cross_unsupported(cfg: Mapping[str, Any]) -> None:
    """Cross-tokenizer drafting is a chain of K draft-model tokens, caught up in one forward."""
    name = cfg.get("name")
    if cfg.get("tree", "chain") != "chain":
        raise ConfigError(f"strategy.tree={cfg.get('tree')!r} with cross-tokenizer drafting (strategy {name!r}: the "
                          f"draft's tokenizer differs from the target's, or cross_tokenizer=uad/tli); allowed: tree=chain")
    if cfg.get("one_extra_forward_pass", False):
        raise ConfigError(f"strategy.one_extra_forward_pass=true with cross-tokenizer drafting (strategy {name!r}); "
                          f"allowed: false (the draft catches up on the re-tokenized text in one forward)")


def cross_rule(ctx: BuildContext, mode: str) -> str | None:
    """The cross-tokenizer rule for this draft and target: None (same tokenizer: plain draft_model), "uad" or "tli".
    auto picks uad at T=0 and tli at T>0 when the tokenizers differ: a shared id means another token to each (a
    draft that agrees on every shared id but has more ids is the same family; plain draft_model refuses it)."""
    if mode in ("uad", "tli"):
        return mode
    if mode != "auto" or ctx.draft is None or first_disagreement(ctx.draft.tokenizer, ctx.target.tokenizer) is None:
        return None
    return "uad" if ctx.sampling.greedy else "tli"
