"""The default's 24 T=0 runs of the twenty-eighth session (tpot_split.txt, beside this script): speedup against the
time of target-only decoding's 1-token step in the same process, and the strategy's TPOT on the same axis.
Writes tpot_split.png here. Run: python experiments/cpu/amd-run13/plot_tpot_split.py"""
from pathlib import Path

from matplotlib.figure import Figure

HERE = Path(__file__).parent
rows = [line.split() for line in (HERE / "tpot_split.txt").read_text().splitlines()[1:] if line[:1].isdigit()]
step = [float(r[3]) for r in rows]  # target-only 1-token step, ms
speed = [float(r[5]) for r in rows]
strat = [float(r[2]) for r in rows]  # the strategy's TPOT, ms

fig = Figure(figsize=(8.4, 3.6))
left, right = fig.subplots(1, 2)
left.scatter(step, speed, s=18)
left.axvline(30, color="0.7", lw=0.8, ls="--")
left.set(xlabel="target-only 1-token step (ms), same process", ylabel="speedup (TPOT ratio)",
         title="eagle_auto, AMD EPYC, 24 runs")
right.scatter(step, strat, s=18, color="tab:orange")
right.plot([min(step), max(step)], [min(step), max(step)], color="0.7", lw=0.8, label="target-only (y = x)")
right.set(xlabel="target-only 1-token step (ms), same process", ylabel="eagle_auto TPOT (ms)",
          title="the strategy's own speed")
right.legend(loc="upper left", fontsize=8)
fig.tight_layout()
fig.savefig(HERE / "tpot_split.png", dpi=110)
print(f"{len(rows)} runs -> {HERE / 'tpot_split.png'}")
