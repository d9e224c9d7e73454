"""AL against the length of the response, and how much of it is text the target repeats.

Reads specbench job directories (results.json beside outputs.jsonl or outputs.jsonl.gz, written with each step's
tokens: specbench since 2026-12-07) and prints one markdown table: per job, its head, set, temperature, the mean
response length and the share that ended at EOS, the job's AL, AL over stretches of the response
(specbench.metrics.al_by_position: the first 64 positions are what a 64-token sweep measures), and the steps taken
inside repeated text.

A step is "in a repeat" when the last N tokens before it (prompt and response so far, N = --ngram, default 8) occurred
earlier in that text: the target is running over ground it has covered, as in a greedy loop, and a drafter can copy.
AL is then given apart for steps in a repeat and for the rest ("fresh"). As al_by_position does, each prompt's last
step is left out (max_new_tokens or EOS may have cut it).

    python experiments/drafters/length/analyze.py <job or sweep dir> [...] [--ngram 8]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specbench.metrics import al_by_position
from specbench.report import outputs_rows


def repeats(context: list[int], n: int) -> list[bool]:
    """seen[i]: the n tokens before position i occurred earlier in context[:i - 1] (ending before i)."""
    seen, grams = [False] * (len(context) + 1), set()
    for i in range(n, len(context) + 1):
        gram = tuple(context[i - n:i])
        seen[i] = gram in grams
        grams.add(gram)
    return seen


def job_row(job: Path, results: dict, outputs: list[dict], n: int, category: str | None = None) -> dict | None:
    """One table row: a job's (results.json, outputs lines) figures, over its prompts of `category` if given."""
    rows = [r for r in outputs if category is None or r.get("category") == category]
    if not rows or not all(isinstance(r["metrics"].get("tokens_per_step"), list) for r in rows):
        return None
    run = results["run"]
    checkpoint = run.get("checkpoint") or {}
    head = Path(checkpoint["weights"]).parent if checkpoint.get("weights") else Path(run["strategy"])
    name = head.parent.name if head.name == "checkpoint" else head.name  # a training run's <name>/checkpoint
    counted = {"repeat": [0, 0], "fresh": [0, 0]}  # [steps, tokens]
    for r in rows:
        context = list(r["prompt_token_ids"]) + list(r["output_token_ids"])
        seen = repeats(context, n)
        position = 1  # 0: the prefill's token
        for tokens in r["metrics"]["tokens_per_step"][:-1]:
            kind = "repeat" if seen[len(r["prompt_token_ids"]) + position] else "fresh"
            counted[kind][0] += 1
            counted[kind][1] += tokens
            position += tokens
    stretches = {s["start"]: f"{s['acceptance_length']:.3f}"
                 for s in al_by_position([r["metrics"]["tokens_per_step"] for r in rows], starts=(0, 64, 256))}

    steps = counted["repeat"][0] + counted["fresh"][0]
    strategy = run["strategy"] + ("" if run.get("tree") in (None, "chain") else f" {run['tree']}")
    return {
        "job": job.name if category is None else f"{job.name} {category}", "head": name, "strategy": strategy,
        "set": run["dataset"], "T": run["temperature"],
        "prompts": len(rows), "max tokens": run["max_new_tokens"],
        "mean tokens": f"{sum(len(r['output_token_ids']) for r in rows) / len(rows):.0f}",
        "ended at EOS": f"{sum(r['metrics']['finished_by'] == 'eos' for r in rows) / len(rows):.0%}",
        "AL": f"{1 + sum(r['metrics']['accepted_tokens'] for r in rows) / max(1, sum(r['metrics']['drafts'] for r in rows)):.3f}",
        "AL 0-63": stretches.get(0, "-"), "AL 64-255": stretches.get(64, "-"), "AL 256+": stretches.get(256, "-"),
        "steps in a repeat": f"{counted['repeat'][0] / steps:.0%}" if steps else "-",
        "AL fresh": f"{counted['fresh'][1] / counted['fresh'][0]:.3f}" if counted["fresh"][0] else "-",
        "AL in a repeat": f"{counted['repeat'][1] / counted['repeat'][0]:.3f}" if counted["repeat"][0] else "-",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--ngram", type=int, default=8, help="tokens that must recur for a step to be in a repeat")
    parser.add_argument("--by-category", action="store_true", help="a row per prompt category of each job too")
    args = parser.parse_args(argv)
    jobs = sorted({p.parent for d in args.dirs for p in d.rglob("results.json")},
                  key=lambda p: (str(p.parent), int(p.name) if p.name.isdigit() else -1, p.name))
    rows = []
    for j in jobs:  # each job's files read once
        results, outputs = json.loads((j / "results.json").read_text()), outputs_rows(j) or []
        rows.append(job_row(j, results, outputs, args.ngram))
        if args.by_category:
            categories = sorted({str(r.get("category")) for r in outputs})
            rows += [job_row(j, results, outputs, args.ngram, c) for c in categories]
    rows = [r for r in rows if r is not None]
    if not rows:
        print("no job with each step's tokens in its outputs", file=sys.stderr)
        return 1
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    print(f"\nA step is in a repeat when the {args.ngram} tokens before it occurred earlier in the prompt and response.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
