#!/usr/bin/env bash
# The bfloat16 head's sweep (fifty-third session, one H100; fp32 decoding, 64 new tokens, k = 3) read on the CPU,
# nothing rerun: each job's AL with its 95% interval over prompts, then the bfloat16 head against the float32 head of
# the same recipe and seed (seed 0, deep/scratch2/deep2-target) and against the shipped head, on the same prompts at
# the same temperature, paired (specbench.report --against). Chain jobs: 0-5 MT-Bench, 6-11 HumanEval; in each set
# the shipped head, the float32 2-layer head and the bfloat16 2-layer head, each at T = 0 then T = 1. Tree jobs
# (k = 4, top_k 4, 8 nodes, T = 0): 0-2 MT-Bench, 3-5 HumanEval, the same three heads.
set -euo pipefail
D=experiments/drafters/deep/bf16/al
python - "$D" <<'PY'
import json, sys
from pathlib import Path
from specbench.metrics import ratio_ci95
from specbench.report import per_prompt_acceptance
for sweep in ("chain", "tree"):
    for job in sorted((Path(sys.argv[1]) / sweep).iterdir(), key=lambda p: int(p.name)):
        run = json.loads((job / "results.json").read_text())["run"]
        ids, accepted, drafts = per_prompt_acceptance(job)
        low, high = ratio_ci95(accepted, drafts, 1.0)
        head = "/".join(Path(run["checkpoint"]["given"]).parts[-2:])
        print(f"{sweep} job {job.name}: {run['dataset']} T={run['temperature']:g} {head}: "
              f"AL {1 + sum(accepted) / sum(drafts):.3f}, 95% interval over its {len(ids)} prompts {low:.3f}-{high:.3f}")
PY
pair() {  # sweep, reference job, the job compared with it
  python -m specbench.report "$D/$1" --against "$D/$1/$2" --out "/tmp/bf16-paired-$1-$2" | sed -n '/^## AL against/,/^Not compared/p' \
    | awk -v j="$3" -v s="$1" -v r="$2" -F'|' '$2 ~ "^ *"j" *$" {
        gsub(/ +/, " "); print s " job " j " against job " r ": AL" $6 "difference" $7 "95% interval" $8 "over" $9 "prompts" }'
}
echo "bfloat16 head against the float32 head (seed 0):"
pair chain 2 4; pair chain 3 5; pair chain 8 10; pair chain 9 11; pair tree 1 2; pair tree 4 5
echo "bfloat16 head against the shipped head:"
pair chain 0 4; pair chain 1 5; pair chain 6 10; pair chain 7 11; pair tree 0 2; pair tree 3 5
echo "float32 head (seed 0) against the shipped head:"
pair chain 0 2; pair chain 1 3; pair chain 6 8; pair chain 7 9; pair tree 0 1; pair tree 3 4
