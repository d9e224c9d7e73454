"""The EAGLE chain at T = 0 replayed on the target's own outputs, with every input the head reads computed from
scratch: is the engine's chain the head's best, and why is the first draft accepted less often in the chain (0.545 on
MT-Bench) than the head agrees with the target teacher-forced (0.565, probe_vocab_fallback.py)?

    python experiments/drafters/probe_chain_replay.py <eagle checkpoint> <a T = 0 run's outputs.jsonl[.gz]> [n] [k] [oracle]

At T = 0 the chain's output is the target's greedy output, so its steps are fixed by the head alone. For each step
that starts with the tokens up to x_p accepted, the replay runs the head over the pairs (f_i, x_{i+1}), i < p, f_i
the target's own features (one target forward over prompt + output), drafts d_1 from the last pair, then d_2, d_3
from pairs of the head's own output feature and its previous draft, as drafting does. Each head forward reads the
whole prefix (no cache), so no state carries between steps. Drafts are accepted while they equal the target's
tokens; the next step starts after the bonus token. Printed: the replay's acceptance length and per-position
acceptance (to set beside the engine's results.json for the same run), and the head's teacher-forced agreement at
every response position against at the positions where a step starts (the replay's first drafts).
With `oracle` the drafts after the first read the target's own feature of each drafted token instead of the head's
output (it exists: a draft is only followed while it is the target's token), so the head's error in predicting the
features is taken out: what a head whose output features were exact would accept, all else the same.
"""

from __future__ import annotations

import sys

import torch
from agreement import head_agrees, read_rows, teacher_forced  # this script's folder is on sys.path

from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.eagle import load_eagle_head


def top1(head, feats: torch.Tensor, toks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The head over pairs (feats[i], toks[i]) at positions 0..n-1 -> (top-1 target id, output feature) of the
    last pair."""
    n = feats.shape[0]
    out = head(feats[None], toks[None], torch.arange(n)[None])[0, -1]
    return head.logits(out[None])[0].argmax(-1), out


@torch.inference_mode()
def main(checkpoint: str, outputs: str, n: int = 80, k: int = 3, oracle: bool = False) -> None:
    target = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32)
    head = load_eagle_head(checkpoint, target.model)
    runner = DecoderRunner(target.model)
    accepted_at = [0] * k  # steps whose draft j was accepted
    steps = 0
    forced = {"every response position": [0, 0], "where a step starts": [0, 0]}
    for tokens, plen, out in teacher_forced(runner, read_rows(outputs, n)):
        x, length = tokens[0], tokens.shape[1]
        f = out.hidden[0]  # [N, H] the target's features
        greedy = out.logits[0].argmax(-1)  # greedy[i]: the target's top-1 after x_0..x_i
        # teacher-forced first-draft agreement at every pair i (predicts x_{i+2}), response positions only
        hit = torch.tensor(head_agrees(head, tokens, out))
        resp = torch.arange(length - 2) + 1 >= plen
        forced["every response position"][0] += int(hit[resp].sum())
        forced["every response position"][1] += int(resp.sum())
        p = plen  # x_p: the last accepted token (the prefill's output first)
        while p < length - 1:
            steps += 1
            forced["where a step starts"][0] += int(hit[p - 1])
            forced["where a step starts"][1] += 1
            feats, toks = f[:p], x[1 : p + 1]  # pairs (f_i, x_{i+1}), i < p
            a = 0
            for j in range(k):
                if p + j + 1 >= length:
                    break
                d, g = top1(head, feats, toks)
                if int(d) != int(greedy[p + j]):  # the target's token after x_{p+j}
                    break
                a += 1
                accepted_at[j] += 1
                feats, toks = torch.cat([feats, (f[p + j] if oracle else g)[None]]), torch.cat([toks, d[None]])
            p += a + 1
    al = 1 + sum(accepted_at) / steps
    print(f"replay{' with the target features (oracle)' if oracle else ''}: {steps} steps, acceptance length {al:.3f}, per position "
          + " / ".join(f"{c / steps:.3f}" for c in accepted_at))
    for where, (ok, total) in forced.items():
        print(f"teacher-forced first-draft agreement {where}: {ok / total:.3f} of {total}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], int(args[2]) if len(args) > 2 else 80, int(args[3]) if len(args) > 3 else 3,
         len(args) > 4 and args[4] == "oracle")
