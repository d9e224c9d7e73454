"""The EAGLE chain's acceptance length on MT-Bench, head by head: issue 13's chain aim (2.2 at k = 3, T = 0, all 80
first turns) against every head whose sweep is committed here, except aligned-run1's two (cut at 15% of their
schedule, their sweeps measure the start of training, not a head). Reads the committed results.json files (nothing is
run), prints the table and writes al_history.png beside this file.

    python experiments/drafters/al_history.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
AIM = 2.2
# (label, results.json under experiments/drafters/, what changed from the head before), in the order they were made;
# each is the chain at k = 3, T = 0 on MT-Bench's 80 first turns, fp32, 64 new tokens
HEADS = [
    ("first head", "table/jobs/eagle/4", "top-1 labels, 1 response a prompt (2026-12-01)"),
    ("vocab", "evals/al/0", "2 responses a prompt, draft vocabulary 8192, 4000 steps"),
    ("evals", "evals/al/1", "+10,635 human-written OpenAI-evals requests, 6000 steps"),
    ("soft", "soft-full/al/chain/2", "soft labels (shipped 2026-12-03)"),
    ("nofeat", "nofeat/cpu-al/chain/1", "soft, without the feature loss"),
    ("long", "long/cpu-al/chain/1", "soft, 9000 steps"),
    ("arena", "arena/h100-al/chain/0", "soft, + Arena-Hard's 430 requests x 4"),
    ("wide", "wide/h100-al/chain/0", "soft, twice the target's own requests (shipped 2026-12-05)"),
    ("MLP 4608, half", "mlp/h100-al/chain/0", "wide's data, MLP 4608 and the target's LM head, half its schedule"),
    ("bf16 set", "bf16-data/h100-al/chain/0", "wide's recipe, the set written in bfloat16, 4862 of 6000 steps"),
    ("MLP 3072", "mlp3072/h100-al/chain/0", "wide's recipe, MLP 3072, the set in bfloat16 (23.2 MB, not shipped)"),
    ("twice", "twice/h100-al/chain/0", "wide's recipe, 48,000 more of the target's own requests, the set in bfloat16"),
    ("ft aligned", "aligned-ft/h100-al/chain/1", "the shipped head + 1500 steps at 2e-4, aligned, the set in bfloat16"),
    ("ft plain", "aligned-ft/h100-al/chain/2", "the shipped head + 1500 steps at 2e-4, the set in bfloat16"),
    ("ft grown to 2 layers", "deep/grow-ft/h100-al/chain/1", "the shipped head grown to 2 decoder layers + 1500 steps at 2e-4"),
    ("2 layers", "deep/scratch2/h100-al/chain/2", "wide's recipe, 2 decoder layers, the target's LM head rows, the set in bfloat16"),
    ("2 layers, bf16 training", "deep/bf16/al/chain/4", "the 2-layer recipe trained under bf16 autocast (train.precision)"),
]


def rows() -> list[tuple[str, float, float, str]]:
    """(label, acceptance length, share of steps whose first draft was accepted, what changed) per head."""
    out = []
    for label, rel, what in HEADS:
        r = json.loads((HERE / rel / "results.json").read_text())
        run = r["run"]
        assert (run["dataset"], run["k"], run["temperature"], run["n_prompts"]) == ("mt-bench", 3, 0.0, 80), rel
        out.append((label, r["strategy"]["acceptance_length"], r["strategy"]["per_position_acceptance"][0], what))
    return out


def main() -> None:
    got = rows()
    print("| head | MT-Bench chain AL, k=3, T=0 | first draft accepted | what changed |\n| --- | --- | --- | --- |")
    for label, al, first, what in got:
        print(f"| {label} | {al:.3f} | {first:.3f} | {what} |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(range(len(got)), [al for _, al, _, _ in got], color="tab:blue")
    ax.axhline(AIM, color="tab:red", linestyle="--", label=f"issue 13's aim, {AIM}")
    for i, (_, al, _, _) in enumerate(got):
        ax.text(i, al + 0.01, f"{al:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(got)), [label for label, _, _, _ in got], rotation=30, ha="right", fontsize=8)
    ax.set_ylim(1.0, AIM + 0.2)
    ax.set_ylabel("acceptance length")
    # the first draft's acceptance: what the chain's AL mostly follows, and what the data stopped moving
    rate = ax.twinx()
    rate.plot(range(len(got)), [first for _, _, first, _ in got], color="tab:orange", marker="o",
              label="first draft accepted (right)")
    # 1 + p + p^2 + p^3 = 2.2 at p = 0.607: the rate every position (given the one before) would need for the aim
    rate.axhline(0.607, color="tab:orange", linestyle=":", label="0.607 at every position gives 2.2 (right)")
    rate.set_ylim(0.3, 0.7)
    rate.set_ylabel("share of steps whose first draft was accepted")
    rate.legend(loc="upper right")
    ax.set_title("EAGLE chain on SmolLM2-135M: MT-Bench's 80 first turns, k=3, T=0, head by head")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(HERE / "al_history.png", dpi=120)
    print(f"written: {HERE / 'al_history.png'}")


if __name__ == "__main__":
    main()
