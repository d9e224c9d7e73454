#!/usr/bin/env bash
# 2026-12-04 (eighteenth session), AMD EPYC 2 cores: the default and an 8-node tree, product forms for 9-64 rows off
# (before) and on (after), in turns, each a fresh process through the CLI; logs beside this script.
# The logs were made with experiments/cpu/ab_buckets.py before|after, which set decoder.AUTO_BUCKETS = () for "before"
# and left it alone for "after"; ab_switch.py (the same switch, set by name) replaced it.
set -u
cd "$(dirname "$0")/../../.."
out=experiments/cpu/amd-run11
tree="strategy.num_nodes=8 strategy.top_k=4 strategy.k=4"
declare -A buckets=([before]="()" [after]="(16, 32, 64)")
for round in 1 2; do
  for side in before after; do
    python experiments/cpu/ab_switch.py "AUTO_BUCKETS=${buckets[$side]}" logger=none output_dir=/tmp/ab/$side-tree8-$round $tree \
      > $out/tree8-$side-$round.log 2>&1
    cp /tmp/ab/$side-tree8-$round/results.json $out/tree8-$side-$round.json
  done
done
for side in before after; do
  python experiments/cpu/ab_switch.py "AUTO_BUCKETS=${buckets[$side]}" logger=none output_dir=/tmp/ab/$side-default > $out/default-$side.log 2>&1
  cp /tmp/ab/$side-default/results.json $out/default-$side.json
done
grep -H -E "speedup \(|speed model|identical" $out/*.log
# then EAGLE-2's published tree size (60 nodes, depth 6, top_k 10), batch 1, once each side:
# for side in before after; do python experiments/cpu/ab_switch.py "AUTO_BUCKETS=${buckets[$side]}" logger=none output_dir=/tmp/ab/$side-tree60 \
#   strategy.k_schedule=fixed strategy.k=6 strategy.top_k=10 strategy.num_nodes=60 > $out/tree60-$side.log 2>&1; done
