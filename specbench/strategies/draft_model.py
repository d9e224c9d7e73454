"""draft_model: a smaller causal LM of the same tokenizer drafts K tokens autoregressively.

(Leviathan et al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318.) The draft keeps its
own per-row cache. In the first forward of a step it ingests every committed token it has not yet
seen (the bonus token, plus the last accepted draft when all K were accepted) together, so a step
costs K draft forwards, not K+1 (`one_extra_forward_pass: true` runs the seed PR's K+1 instead). At
T > 0 it samples from its own distribution q, shaped by the same temperature / top-k / top-p as the
target, and returns q for rejection sampling. The loop is the proposer base's; this file only
builds the draft's runner and checks that the draft can speak for the target.
"""

from __future__ import annotations

from typing import Any

from specbench.models.draft_runner import make_draft_runner, raise_if_tokenizers_disagree
from specbench.strategies.base import BuildContext, Proposer, raise_if_vocab_too_large


class DraftModelProposer(Proposer):
    owns_kv_cache = True
    samples = True
    cuda_graphs = True
    needs_draft_model = True

    def __init__(self, ctx: BuildContext, k: int, name: str = "draft_model", **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        assert ctx.draft is not None, "run() loads the draft for strategies with needs_draft_model"
        raise_if_vocab_too_large(ctx.draft.vocab_size, ctx.target.vocab_size, ctx.draft.spec.label, ctx.target.spec.label)
        raise_if_tokenizers_disagree(ctx.draft.tokenizer, ctx.target.tokenizer, ctx.draft.spec.label, ctx.target.spec.label)
        # chosen from the DRAFT's own config: a VLM draft gets images (begin_batch), a text draft plain positions
        self.runner = make_draft_runner(ctx.draft.model, ctx.backend, graphs=self.use_graphs,
                                        batch_invariant=ctx.batch_invariant)
