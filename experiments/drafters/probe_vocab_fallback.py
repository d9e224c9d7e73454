"""How much of the first draft's misses is the reduced draft vocabulary's, and would the target's own LM-head rows
for the tokens outside it win them back? Teacher-forced, on the target's own T = 0 outputs (a run's outputs.jsonl).

    python experiments/drafters/probe_vocab_fallback.py <eagle checkpoint with a draft vocabulary> <outputs.jsonl[.gz]> [n]

At every response position (pair i = (f_i, x_{i+1}), as in the first draft of every step) it compares three top-1s
with the target's:
- draft vocabulary: the head as it drafts (its own LM head over its N ids; every other token has q = 0);
- target rows: the target's LM head over the head's output feature (the whole vocabulary, nothing trained);
- fallback: the head's own distribution inside its vocabulary, scaled to the mass the target's rows give that
  vocabulary, and the target's rows outside it: log q(v) = own_v - LSE(own) + LSE(rows over D) for v in D, and
  rows_v outside. The own logits' level is free in training (its loss is a softmax over D alone), so this puts both
  on one scale without a fitted constant.
Printed per category (the outputs' own categories) and overall, with the share of positions whose target token lies
outside the draft vocabulary. Nothing is trained and the decoding path is not changed: a bound on what such a head
could give the first draft, not an acceptance length.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from agreement import read_rows, teacher_forced  # this script's folder is on sys.path

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.eagle import load_eagle_head


@torch.inference_mode()
def main(checkpoint: str, outputs: str, n: int = 80) -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    head = load_eagle_head(checkpoint, target.model)
    ids = head.target_ids()
    assert ids is not None, f"{checkpoint} has no reduced draft vocabulary"
    rows_w = target.model.get_output_embeddings().weight  # [V, H]
    inside = torch.zeros(rows_w.shape[0], dtype=torch.bool)
    inside[ids] = True
    runner = DecoderRunner(target.model)
    names = ("draft vocabulary", "target rows", "fallback")
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])  # hits x3, outside, positions
    rows = read_rows(outputs, n)
    for row, (tokens, plen, out) in zip(rows, teacher_forced(runner, rows)):
        length = tokens.shape[1]
        feat = head(out.hidden[:, :-2], tokens[:, 1:-1], torch.arange(length - 2)[None])[0]  # pair i -> y_{i+1}
        x = head.norm(feat) if head.norm is not None else feat
        own = F.linear(x, head.draft_lm_head.weight)  # [T, Vd]
        rows = F.linear(x, rows_w)  # [T, V]
        full_own = torch.full_like(rows, float("-inf"))
        full_own[:, ids] = own
        mixed = rows.clone()
        mixed[:, ids] = own - own.logsumexp(-1, keepdim=True) + rows[:, ids].logsumexp(-1, keepdim=True)
        truth = out.logits[0, 1:-1].argmax(-1)
        keep = torch.arange(length - 2) + 1 >= plen  # response positions only
        for key in (row.get("category") or "all", "overall"):
            t = tally[key]
            for j, logits in enumerate((full_own, rows, mixed)):
                t[j] += int((logits.argmax(-1) == truth)[keep].sum())
            t[3] += int((~inside[truth])[keep].sum())
            t[4] += int(keep.sum())
    print("| category | positions | target token outside the vocabulary | " + " | ".join(names) + " |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key, t in sorted(tally.items(), key=lambda kv: (kv[0] == "overall", kv[0])):
        print(f"| {key} | {t[4]} | {t[3] / t[4]:.3f} | " + " | ".join(f"{t[j] / t[4]:.3f}" for j in range(3)) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 80)
