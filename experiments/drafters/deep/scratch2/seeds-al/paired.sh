#!/usr/bin/env bash
# The seeds' sweep (chain, k = 3, fp32 on an H100, 2026-12-07; jobs 0-5 MT-Bench, 6-11 HumanEval; the shipped head,
# the 2-layer head's seed 0 and seed 1, each at T = 0 and T = 1) read again on the CPU, nothing rerun: each job's AL
# with its 95% interval over prompts, and every job's AL against the shipped head's on the same prompts, paired
# (specbench.report --against). The jobs' outputs.jsonl are kept gzipped beside their results.json.
set -euo pipefail
D=experiments/drafters/deep/scratch2/seeds-al
for ref in 0 1 6 7; do  # the shipped head: MT-Bench T=0, T=1; HumanEval T=0, T=1
  python -m specbench.report $D/chain --against $D/chain/$ref --out /tmp/seeds-paired-$ref | sed -n '/^## AL against/,/^Not compared/p'
done
python - "$D/chain" <<'PY'
import json, sys
from pathlib import Path
from specbench.metrics import ratio_ci95
from specbench.report import per_prompt_acceptance
for job in sorted(Path(sys.argv[1]).iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
    if not (job / "results.json").is_file():
        continue
    run = json.loads((job / "results.json").read_text())["run"]
    ids, accepted, drafts = per_prompt_acceptance(job)
    al = 1 + sum(accepted) / sum(drafts)
    low, high = ratio_ci95(accepted, drafts, 1.0)
    head = "/".join(Path(run["checkpoint"]["given"]).parts[-2:])
    print(f"job {job.name}: {run['dataset']} T={run['temperature']} {head}: AL {al:.3f}, 95% interval over its "
          f"{len(ids)} prompts {low:.3f}-{high:.3f}")
PY
