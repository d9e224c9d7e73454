"""Teacher-forced agreement of an EAGLE head with SmolLM2-135M on the target's own outputs.

    python experiments/drafters/agreement.py <eagle checkpoint> <a run's outputs.jsonl> [n_prompts]

For each prompt + output of the run, the target's true final-norm features f_i and its top-1 y_i come
from one DecoderRunner forward; the head reads (f_i, x_{i+1}) as at unroll step 1 of training and
as in the first draft of every step. Printed: the share of positions where the head's top-1 equals
the target's, split into prompt and response positions (the response share is what bounds the first
draft's acceptance at T = 0), and the target's mean top-1 probability at response positions.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator
from typing import Any

import torch

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.eagle import load_eagle_head


def read_rows(outputs: str, n: int) -> list[dict[str, Any]]:
    """The first n rows of a run's outputs.jsonl (or a gzip of it, .gz)."""
    with (gzip.open if outputs.endswith(".gz") else open)(outputs, "rt") as f:
        return [json.loads(line) for line in f][:n]


def teacher_forced(runner: DecoderRunner, rows: list[dict[str, Any]]) -> Iterator[tuple[torch.Tensor, int, Any]]:
    """For each of a run's output rows (read_rows): the tokens [1, N] (prompt + output), the prompt's length, and one
    target forward over them with its final-norm features (`out.logits` [1, N, V], `out.hidden` [1, N, H])."""
    for row in rows:
        ids = row["prompt_token_ids"] + row["output_token_ids"]
        runner.allocate(1, len(ids))
        tokens = torch.tensor([ids])
        yield tokens, len(row["prompt_token_ids"]), runner(tokens, torch.arange(len(ids))[None], attn_len=len(ids),
                                                           want_hidden=True)


def head_agrees(head: Any, tokens: torch.Tensor, out: Any) -> list[bool]:
    """For pair i = (f_i, x_{i+1}), i = 0 .. N-3, as at unroll step 1 of training and in the first draft of every step:
    whether the head's top-1 equals the target's y_{i+1}. `logits()` puts a reduced draft vocabulary's ids at their
    target ids (lm_head alone gives draft ids)."""
    length = tokens.shape[1]
    pred = head.logits(head(out.hidden[:, :-2], tokens[:, 1:-1], torch.arange(length - 2)[None]))[0].argmax(-1)
    return (pred == out.logits[0, 1:-1].argmax(-1)).tolist()


@torch.inference_mode()
def main(checkpoint: str, outputs: str, n: int = 20) -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    head = load_eagle_head(checkpoint, target.model)
    runner = DecoderRunner(target.model)
    hits = {"prompt": [0, 0], "response": [0, 0]}
    confidence = []
    for tokens, plen, out in teacher_forced(runner, read_rows(outputs, n)):
        length = tokens.shape[1]
        confidence.append(out.logits[0, plen - 1 : length - 1].softmax(-1).max(-1).values)
        for i, ok in enumerate(head_agrees(head, tokens, out)):  # pair i predicts y_{i+1}
            side = hits["response" if i + 1 >= plen else "prompt"]
            side[0] += ok
            side[1] += 1
    for side, (ok, total) in hits.items():
        print(f"{side} positions: head top-1 == target top-1 at {ok / max(total, 1):.3f} of {total}")
    print(f"target's mean top-1 probability at response positions: {torch.cat(confidence).mean():.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 20)
