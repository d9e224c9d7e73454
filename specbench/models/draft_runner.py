"""The draft model's runner, and the check that lets a draft with a smaller vocabulary stay lossless.

`make_draft_runner` picks the runner from the DRAFT's own config (a VLM draft gets VLMRunner and
the images, a text draft our decoder or transformers' forward, whatever the target is), puts it
under CUDA graphs when asked, and guards it against ids it cannot embed (`OutOfVocabGuard`).
`first_disagreement` finds a shared id that means another token to the target (draft_model then drafts
across tokenizers, strategies/cross_tokenizer.py, or with cross_tokenizer=off `raise_if_tokenizers_disagree`
refuses the draft).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from specbench.errors import ConfigError
from specbench.models.cuda_graphs import maybe_graphed
from specbench.models.decoder import ForwardOutput
from specbench.models.multimodal import make_vlm_aware_runner
from specbench.models.runner import Runner, RunnerWrapper


class OutOfVocabGuard(RunnerWrapper):
    """A draft runner that maps ids outside its own vocabulary to `fallback_id` before each forward.

    A draft with a smaller vocabulary than the target's (Qwen3-0.6B 151936 < Qwen2.5-VL 152064) still
    has to ingest every committed token, and the target may emit an id the draft cannot embed. The
    draft only proposes; what it reads for such an id changes its guesses, never the output (the
    target verifies, and the draft's q is zero there). Everything else is the wrapped runner's.
    """

    def __init__(self, runner: Runner, fallback_id: int = 0, target_vocab: int | None = None) -> None:
        self.runner = runner
        self.fallback_id = fallback_id
        # a target whose ids all fit the draft's vocabulary needs no mapping (three launches a draft forward less)
        self.needed = not target_vocab or target_vocab > runner.vocab_size

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, *args: Any, **kwargs: Any) -> ForwardOutput:
        if self.needed:
            tokens = tokens.masked_fill(tokens >= self.runner.vocab_size, self.fallback_id)  # [B, T]
        return self.runner(tokens, positions, *args, **kwargs)



def make_draft_runner(hf_model: nn.Module, backend: str = "auto", num_layers: int | None = None,
                      graphs: bool = False, batch_invariant: bool = True,
                      target_vocab: int | None = None) -> OutOfVocabGuard:
    """The draft's runner, chosen from the DRAFT's own config (under CUDA graphs when `graphs` and it is
    our decoder), guarded against target-only ids (ids of the draft's tokenizer, or the target's: `target_vocab`,
    its size, when the draft shares the target's ids; the guard then runs only where the draft's is smaller)."""
    pad = getattr(getattr(hf_model.config, "text_config", hf_model.config), "pad_token_id", None)
    runner = maybe_graphed(make_vlm_aware_runner(hf_model, backend, num_layers, batch_invariant, graphs=graphs), graphs)
    return OutOfVocabGuard(runner, pad if isinstance(pad, int) and 0 <= pad < runner.vocab_size else 0, target_vocab)


def first_disagreement(draft_tok: Any, target_tok: Any) -> tuple[int, str, str] | None:
    """The first shared id (< both tokenizers' sizes) that the two tokenizers map to different tokens, as
    (id, draft's token, target's token); None when they agree on every shared id. Tokenizers without an id ->
    token table (the byte stand-in of random presets) are not compared."""
    if draft_tok is target_tok or not all(hasattr(t, "convert_ids_to_tokens") for t in (draft_tok, target_tok)):
        return None
    n = min(len(draft_tok), len(target_tok))
    ids = list(range(n))
    a, b = draft_tok.convert_ids_to_tokens(ids), target_tok.convert_ids_to_tokens(ids)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, x, y
    return None


def raise_if_tokenizers_disagree(draft_tok: Any, target_tok: Any, draft_name: str, target_name: str) -> None:
    """Refuse a draft whose tokenizer maps a shared id (< both tokenizers' sizes) to a different token.

    Drafting with a smaller vocabulary is lossless only if every id the draft emits means the same
    token to the target. Tokenizers without an id -> token table (the byte stand-in of random
    presets) are not compared.
    """
    found = first_disagreement(draft_tok, target_tok)
    if found is not None:
        i, x, y = found
        n = min(len(draft_tok), len(target_tok))
        raise ConfigError(
            f"draft {draft_name!r} and target {target_name!r} tokenizers disagree on id {i}: draft has {x!r}, "
            f"target has {y!r} (first of the {n} shared ids to differ); draft_model with strategy.cross_tokenizer=off "
            f"needs the same token for every shared id. Set strategy.cross_tokenizer=auto (draft across tokenizers), "
            f"or pick a draft of the target's tokenizer family (e.g. Qwen3 for Qwen2.5-VL / Qwen3-VL)"
        )
