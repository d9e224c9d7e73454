#!/usr/bin/env bash
# 2026-12-04 (eighteenth session), AMD EPYC 2 cores with AVX512-BF16: the default with the drafter's bf16 product form
# off (before) and on (after), in turns, each a fresh process through the CLI; logs and results.json beside this script.
# Needs experiments/cpu/patches/draft-bf16-form.patch applied (git apply), which was not landed.
set -u
cd "$(dirname "$0")/../../.."
out=experiments/cpu/amd-run11
for round in 1 2 3; do
  for side in False True; do
    name=default-draftbf16-$side-$round
    python experiments/cpu/ab_switch.py DRAFT_BF16_FORM=$side logger=none output_dir=/tmp/ab/$name > $out/$name.log 2>&1
    cp /tmp/ab/$name/results.json $out/$name.json
  done
done
grep -H -E "speedup \(|speed model|identical" $out/default-draftbf16-*.log
