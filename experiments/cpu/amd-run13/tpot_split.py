"""Twenty-eighth session: the default's runs split by how fast target-only decoding ran in the same process.

Reads the results.json of every `eagle_auto` T=0 run given (the CLI's outputs/<date>/<time>/results.json) and prints
one row a run (baseline and strategy TPOT, the 1-token step and the tree's verify in ms, the speedup), then the
speedups of the runs whose target-only step was fast (< 30 ms) and slow (>= 30 ms).

    python experiments/cpu/amd-run13/tpot_split.py outputs/2026-12-05/1[4-9]-*/results.json <fresh clone's results.json>
"""
import json
import statistics
import sys

rows = []
for path in sys.argv[1:]:
    d = json.load(open(path))
    if d["config"]["strategy"]["name"] != "eagle_auto" or d["config"]["sampling"]["temperature"] != 0:
        continue
    b, s = d["baseline"], d["strategy"]
    rows.append((path.split("/")[-2], b["tpot_ms"]["mean"], s["tpot_ms"]["mean"], b["verify_ms_per_step"],
                 s["verify_ms_per_step"], d["speedup"]["speedup"]))
print("run       base_tpot_ms strat_tpot_ms step_1tok_ms tree_verify_ms speedup")
for r in rows:
    print(f"{r[0]:9s} {r[1]:12.1f} {r[2]:13.1f} {r[3]:12.1f} {r[4]:14.1f} {r[5]:7.2f}")
for name, keep in (("target-only step < 30 ms", lambda r: r[3] < 30), ("target-only step >= 30 ms", lambda r: r[3] >= 30)):
    sp = sorted(r[5] for r in rows if keep(r))
    st = [r[2] for r in rows if keep(r)]
    print(f"{name}: {len(sp)} runs, speedup {sp[0]:.2f}-{sp[-1]:.2f} (median {statistics.median(sp):.2f}), "
          f"strategy TPOT {min(st):.1f}-{max(st):.1f} ms")
