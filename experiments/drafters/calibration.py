"""Teacher-forced step-1 agreement and T = 1 acceptance of EAGLE heads with SmolLM2-135M on the target's own outputs.

    python experiments/drafters/calibration.py <a run's outputs.jsonl> <n_prompts> <eagle checkpoint> [<checkpoint> ...]

For each prompt + output of the run, one target forward gives its final-norm features f_i and its distribution p at
every position; each head reads (f_i, x_{i+1}) as in the first draft of a step and gives q (through `logits`, so a
reduced draft vocabulary lands at its target ids). Over the response positions it prints: how often the head's top-1
is the target's (what the first draft's acceptance is at T = 0), how often the target's top-1 is among the head's 2
and 4 best (a tree's first level with top_k = 2, the default's, and 4), the mean of sum_x min(p, q) (a sampled draft's
acceptance at T = 1, as the chain drafts), the mean of p's mass on the head's 2 best tokens (the acceptance at T = 1 of
the default tree's first level, whose top-k picks are verified as one-hot drafts), and the mean top-1 probability and
entropy of q and of p.
"""

from __future__ import annotations

import sys

import torch
from agreement import read_rows, teacher_forced  # this script's folder is on sys.path

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.eagle import load_eagle_head


@torch.inference_mode()
def main(outputs: str, n: int, checkpoints: list[str]) -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    heads = {c: load_eagle_head(c, target.model) for c in checkpoints}
    runner = DecoderRunner(target.model)
    sums = {c: torch.zeros(7, dtype=torch.float64) for c in checkpoints}  # top-1, top-2, top-4, overlap, p(top-2), max q, H(q)
    p_stats, count = torch.zeros(2, dtype=torch.float64), 0
    for tokens, plen, out in teacher_forced(runner, read_rows(outputs, n)):
        length = tokens.shape[1]
        # pair i = (f_i, x_{i+1}) predicts the target's distribution at i+1; response pairs: i + 1 >= plen
        lo = plen - 1
        p = out.logits[0, lo + 1 : length - 1].softmax(-1)  # [R, V]
        top1 = p.argmax(-1)
        p_stats += torch.stack([p.max(-1).values.sum(), -(p * p.clamp_min(1e-30).log()).sum()]).double()
        count += p.shape[0]
        for c, head in heads.items():
            feat = head(out.hidden[:, : length - 2], tokens[:, 1 : length - 1], torch.arange(length - 2)[None])
            q = head.logits(feat)[0, lo:].float().softmax(-1)  # [R, V]
            top4 = q.topk(4, -1).indices
            sums[c] += torch.stack([
                (q.argmax(-1) == top1).sum(), (top4[:, :2] == top1[:, None]).any(-1).sum(),
                (top4 == top1[:, None]).any(-1).sum(), torch.minimum(p, q).sum(), p.gather(-1, top4[:, :2]).sum(),
                q.max(-1).values.sum(), -(q * q.clamp_min(1e-30).log()).sum()]).double()
    print(f"{count} response positions of {n} prompts; target: mean top-1 probability {p_stats[0] / count:.3f}, "
          f"entropy {p_stats[1] / count:.3f} nats")
    print("| head | top-1 == target's | target's top-1 in head's top-2 | in top-4 | sum min(p, q) "
          "| p on head's top-2 | head's top-1 probability | head's entropy (nats) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for c, s in sums.items():
        print(f"| {c} | " + " | ".join(f"{v / count:.3f}" for v in s.tolist()) + " |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
