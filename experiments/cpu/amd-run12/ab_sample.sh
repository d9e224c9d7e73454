#!/usr/bin/env bash
# The runs in experiments/cpu/README.md, "The default's ten prompts spread over MT-Bench's 8 categories" (nineteenth
# session, 2026-12-04, at 954d3af; AMD EPYC, 2 cores, AVX-512 with AVX512-BF16, no AMX). One at a time, nothing else running.
set -eu
o=${1:-/tmp/amd-run12}
for i in 1 2 3 4 5; do python -m specbench logger=none output_dir=$o/default-spread-$i > $o/default-spread-$i.log 2>&1; done
# the old ten (MT-Bench's first ten, all writing) and the new ten, each a fresh process, in turns
for i in 1 2 3; do for s in first spread; do
  python -m specbench logger=none dataset.sample=$s output_dir=$o/ab-$s-$i > $o/ab-$s-$i.log 2>&1
done; done
# acceptance only (no baseline): the chain, and the tree shapes at a verify of 5 and 6 tokens
python -m specbench -m logger=none baseline=false strategy=eagle hydra.sweep.dir=$o/chain > $o/al-chain-k3.log 2>&1
python -m specbench -m logger=none baseline=false strategy.top_k=2,3 strategy.num_nodes=4,5 hydra.sweep.dir=$o/shapes \
  > $o/al-tree-shapes.log 2>&1
# (default-spread-1 and -2 ran first, before the A/B, each under /usr/bin/time; the README's first command ran in a
# fresh clone at 954d3af: fresh-clone-954d3af-default.txt)
# all 80 MT-Bench prompts, once, after the rest: default-all80.log / .json
python -m specbench logger=none dataset.num_prompts=null output_dir=$o/default-all80 > $o/default-all80.log 2>&1
