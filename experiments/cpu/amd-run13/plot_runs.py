"""The default job's T=0 speedups on the AMD EPYC (twenty-sixth session), one point per run, the chain
(eagle_adaptive, main's default) and the tree (eagle_tree) of the same round joined by a line, read from the CLI
outputs beside this script. Writes default_runs.png here and prints the pairs.
Run: python experiments/cpu/amd-run13/plot_runs.py"""
import re
from pathlib import Path

from matplotlib.figure import Figure

HERE = Path(__file__).parent
# (chain output, tree output) of each round in which the two ran in turns
PAIRS = [("ab-eagle_adaptive-1.txt", "ab-eagle_tree-1.txt"), ("ab-eagle_adaptive-2.txt", "ab-eagle_tree-2.txt")] + [
    (f"ab-eagle_adaptive-t0-{r}.txt", f"ab-eagle_tree-t0-{r}.txt") for r in (3, 4, 5)] + [
    (f"ab3-adaptive-{r}.txt", f"ab3-tree-{r}.txt") for r in (1, 2, 3)]
ALONE = {"chain": ["first-default.txt"], "tree": ["tree-eagle_tree-1.txt", "tree-eagle_tree-2.txt", "auto-final-1.txt"]}


def speedup(name: str) -> float:
    text = (HERE / name).read_text()
    return float(re.search(r"^speedup \(baseline TPOT / strategy TPOT, batches in turns\): ([0-9.]+)x", text, re.M)[1])


fig = Figure(figsize=(5.2, 4.2))
ax = fig.subplots()
for i, (chain, tree) in enumerate(PAIRS):
    a, b = speedup(chain), speedup(tree)
    ax.plot([0, 1], [a, b], color="0.6", lw=0.8, zorder=1)
    ax.scatter([0, 1], [a, b], color=["tab:blue", "tab:orange"], zorder=2, s=22)
    print(f"round {i + 1}: chain {a:.2f}x  tree {b:.2f}x  ({b / a - 1:+.0%})")
for x, (side, names) in enumerate(ALONE.items()):
    values = [speedup(n) for n in names]
    ax.scatter([x + 0.08] * len(values), values, facecolors="none", edgecolors="k", s=22, zorder=2)
    print(f"{side} alone: {' '.join(f'{v:.2f}x' for v in values)}")
ax.set_xticks([0, 1], ["eagle_adaptive\n(chain, main's default)", "eagle_tree\n(eagle_auto here, pending 0004)"])
ax.set_xlim(-0.5, 1.5)
ax.set_ylabel("speedup over target-only decoding (TPOT)")
ax.set_title("Default job, AMD EPYC 2 cores, float32, T=0\n(lines: the same round, in turns; open: run alone)", fontsize=9)
ax.grid(axis="y", alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "default_runs.png", dpi=110)
print(f"wrote {HERE / 'default_runs.png'}")
