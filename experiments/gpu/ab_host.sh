#!/usr/bin/env bash
# A/B of a package change through the CLI on one device machine: frontdoor.sh's block 1 job (8B + 0.6B, synthetic
# AL 2.8, k=3, batch 1, batch-invariant kernels, the first job of a fresh process) with the checkout's package
# ("after") and with a copy of an older one in ab_before/specbench ("before"; made beside the checkout with
#   git archive <commit> specbench conf pyproject.toml | tar -x -C ab_before && rm -rf ab_before/specbench/checkpoints
# (conf/ too: Hydra reads it beside the package; on 2026-12-06 a copy without it failed at once)
# and carried as an untracked folder; any other side name X runs ab_X/ alike), each in its own process, in turns.
# `python -m` puts the working directory first on sys.path, so each side runs from its own folder.
#   bash experiments/gpu/ab_host.sh "$OUT" [order, default "before after"]
set -u
out=${1:-/tmp/ab}; mkdir -p "$out"
root=$PWD
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
i=0
for side in ${2:-before after}; do
  i=$((i + 1))
  dir=$root; [ "$side" = after ] || dir=$root/ab_$side
  ( cd "$dir" && timeout 150 python3 -m specbench logger=none engine.ignore_eos=true target=qwen3-8b-random \
      draft=qwen3-0.6b-random strategy=draft_model strategy.k=3 verify.synthetic_acceptance_length=2.8 dataset=builtin \
      max_new_tokens=128 hydra.run.dir="$out/$i-$side" > "$out/$i-$side.txt" 2>&1 )
  echo "== $i $side (rc $?)"
  grep -E "^\| (TPOT|decode tok/s|time:)|^speedup|^speed model|identical" "$out/$i-$side.txt"
done
