"""Where on MT-Bench the EAGLE head agrees with SmolLM2-135M: teacher-forced top-1 agreement at response positions
(as agreement.py measures it), split by MT-Bench category, by the prompt's length, by the position in the response
and by how sure the target is of its top-1 there (its probability).

    python experiments/drafters/agreement_split.py <eagle checkpoint> <a run's outputs.jsonl> [n_prompts]

The run's outputs.jsonl rows carry each prompt's category. Response position j is the head's first draft of the
response's token j + 1, from the target's features up to token j.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable

import torch
from agreement import head_agrees, read_rows, teacher_forced  # this script's folder is on sys.path

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.eagle import load_eagle_head

PROMPT_BUCKETS = (32, 64, 128, 256, 10**9)  # prompt length in tokens, upper bounds
POSITION_BUCKETS = (8, 16, 32, 64, 10**9)  # response position, upper bounds
CONFIDENCE_BUCKETS = (0.2, 0.4, 0.6, 0.8, 1.01)  # the target's top-1 probability there, upper bounds


def _bucket(x: float, bounds: tuple[float, ...], label: Callable[[float, float], str]) -> str:
    """The label of the first bucket [lo, hi) of `bounds` (upper bounds, from 0) that holds x."""
    lo = 0
    for hi in bounds:
        if x < hi:
            return label(lo, hi)
        lo = hi
    raise AssertionError


def _count_label(lo: int, hi: int) -> str:
    return f"{lo}-{hi - 1}" if hi < 10**9 else f">={lo}"


def _probability_label(lo: float, hi: float) -> str:
    return f"{lo:.1f}-{min(hi, 1.0):.1f}"


@torch.inference_mode()
def main(checkpoint: str, outputs: str, n: int = 80) -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    head = load_eagle_head(checkpoint, target.model)
    runner = DecoderRunner(target.model)
    rows = read_rows(outputs, n)
    splits = ("category", "prompt tokens", "response position", "target's top-1 probability")
    hits: dict[str, dict[str, list[int]]] = {split: defaultdict(lambda: [0, 0]) for split in splits}
    for row, (tokens, plen, out) in zip(rows, teacher_forced(runner, rows)):
        length = tokens.shape[1]
        sure = out.logits[0].softmax(-1).max(-1).values.tolist()  # [N]: the target's top-1 probability at i
        ok = head_agrees(head, tokens, out)  # pair i predicts y_{i+1}
        for i in range(plen - 1, length - 2):
            j = i + 1 - plen  # response position
            for split, key in (("category", row.get("category", "?")),
                               ("prompt tokens", _bucket(plen, PROMPT_BUCKETS, _count_label)),
                               ("response position", _bucket(j, POSITION_BUCKETS, _count_label)),
                               ("target's top-1 probability", _bucket(sure[i + 1], CONFIDENCE_BUCKETS, _probability_label))):
                hits[split][key][0] += ok[i]
                hits[split][key][1] += 1
    for split, table in hits.items():
        print(f"by {split}:")
        for key, (good, total) in sorted(table.items(), key=lambda kv: (len(kv[0]), kv[0])):
            print(f"  {key:>12}: {good / max(total, 1):.3f} of {total}")
    total = [sum(v[0] for v in hits["category"].values()), sum(v[1] for v in hits["category"].values())]
    print(f"all response positions: {total[0] / max(total[1], 1):.3f} of {total[1]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 80)
