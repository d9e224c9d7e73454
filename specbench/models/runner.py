"""Runners: a forward over [B, T] new tokens at per-row positions, over a per-row static cache.

`make_runner` picks our own decoder (specbench.models.decoder) for the Llama / Qwen2 / Qwen3 family
and falls back to `TransformersRunner` for any other causal LM. Every runner, these two, the
CUDA-graphed decoder (models.cuda_graphs), the VLM runner (models.multimodal) and the draft's
guarded runner (models.draft_runner), has the one interface the engine and the strategies call:
`Runner`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from specbench.errors import unknown
from specbench.models.decoder import SUPPORTED_ARCHS, DecoderRunner, ForwardOutput

BACKENDS = ("auto", "native", "transformers")


@runtime_checkable
class Runner(Protocol):
    """A forward over [B, T] new tokens at per-row positions, over a per-row static cache (slot == position).

    A multimodal runner also has `begin_batch(prompts, mm_inputs)`, which the engine calls when present.
    """

    @property
    def vocab_size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def max_len(self) -> int:
        """Cache slots per row (0 before the first allocate)."""
        ...

    def allocate(self, batch_size: int, max_len: int) -> None:
        """Size the cache for `batch_size` rows of `max_len` slots (reused when it already fits)."""

    def __call__(
        self,
        tokens: torch.Tensor,  # [B, T] int64
        positions: torch.Tensor,  # [B, T] int64, each row's own positions
        attn_len: int | None = None,  # attend over slots [0, attn_len): any bound > every position
        logits_at: torch.Tensor | None = None,  # [B, T'] columns of T to return logits for; None = all
        want_hidden: bool = False,  # return the final-norm hidden states [B, T, H]
        hidden_layers: tuple[int, ...] = (),  # and these layers' outputs [B, T, H] each
    ) -> ForwardOutput: ...


class RunnerWrapper:
    """A Runner around another (`self.runner`): the interface delegated, spelled out as class attributes because
    isinstance(_, Runner) looks them up statically on Python >= 3.12; anything else (config, k_cache,
    begin_batch when the wrapped runner has it, ...) falls through to the wrapped runner."""

    runner: Runner

    def __getattr__(self, name: str) -> Any:
        if name == "runner":  # not set yet (unpickling, a failed __init__): no recursion
            raise AttributeError(name)
        return getattr(self.runner, name)

    @property
    def vocab_size(self) -> int:
        return self.runner.vocab_size

    @property
    def device(self) -> torch.device:
        return self.runner.device

    @property
    def max_len(self) -> int:
        return self.runner.max_len

    def allocate(self, batch_size: int, max_len: int) -> None:
        self.runner.allocate(batch_size, max_len)


class TransformersRunner(nn.Module):
    """Fallback for architectures our decoder does not cover: transformers' own forward, no KV cache.

    It keeps each row's tokens by position (slot == position, like the decoder's cache) and
    recomputes the whole prefix on every call. Causal attention makes position p depend only on
    slots 0..p, so stale slots above a row's length never matter. Exact, and slow: O(length) work
    per forward. Use it for correctness on new architectures, not for speed figures.
    """

    def __init__(self, hf_model: nn.Module, num_layers: int | None = None) -> None:
        super().__init__()
        if num_layers is not None:
            raise ValueError("TransformersRunner cannot run a truncated model (num_layers)")
        self.hf_model = hf_model
        self.config = hf_model.config
        self.history: torch.Tensor | None = None  # [B, S] int64

    @property
    def vocab_size(self) -> int:
        return int(self.hf_model.get_output_embeddings().weight.shape[0])

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def max_len(self) -> int:
        return 0 if self.history is None else self.history.shape[1]

    def allocate(self, batch_size: int, max_len: int) -> None:
        self.history = torch.zeros((batch_size, max_len), dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn_len: int | None = None,
                logits_at: torch.Tensor | None = None, want_hidden: bool = False,
                hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        assert self.history is not None, "call allocate() first"
        s = self.max_len if attn_len is None else attn_len
        self.history.scatter_(1, positions, tokens)
        out = self.hf_model(self.history[:, :s], use_cache=False, output_hidden_states=want_hidden or bool(hidden_layers))
        cols = positions if logits_at is None else positions.gather(1, logits_at)  # [B, T']
        logits = out.logits.gather(1, cols[..., None].expand(-1, -1, out.logits.shape[-1])).float()
        hidden = layer_hidden = None
        if out.hidden_states is not None:
            pick = lambda h: h.gather(1, positions[..., None].expand(-1, -1, h.shape[-1]))  # noqa: E731
            hidden = pick(out.hidden_states[-1]) if want_hidden else None
            layer_hidden = [pick(out.hidden_states[i + 1]) for i in hidden_layers]
        return ForwardOutput(logits=logits, hidden=hidden, layer_hidden=layer_hidden or [])


def make_runner(hf_model: nn.Module, backend: str = "auto", num_layers: int | None = None,
                batch_invariant: bool = True) -> DecoderRunner | TransformersRunner:
    """Our decoder where it covers the architecture (backend auto/native), else transformers' forward.
    `batch_invariant` selects our decoder's batch-invariant kernels on CUDA (DecoderRunner)."""
    if backend not in BACKENDS:
        raise unknown("engine.backend", backend, BACKENDS)
    native = hf_model.config.model_type in SUPPORTED_ARCHS
    if backend == "native" and not native:
        raise unknown("architecture for engine.backend=native", hf_model.config.model_type, SUPPORTED_ARCHS,
                      hint="use engine.backend=auto or transformers")
    if backend == "transformers" or not native:
        return TransformersRunner(hf_model, num_layers)
    return DecoderRunner(hf_model, num_layers, batch_invariant=batch_invariant)
