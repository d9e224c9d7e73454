#!/usr/bin/env bash
# thirty-first session: the default job (eagle_auto, main's command with logger=none) with the wide head (shipped at the
# commit after 904a2ad) and with the head before it (`git show 904a2ad:specbench/checkpoints/eagle-smollm2-135m/...`
# unpacked at /tmp/old-head), in turns, N rounds, the order reversed every round; nothing else running
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/amd-run14
for i in $(seq "${N:-3}"); do
  if [ $((i % 2)) = 1 ]; then order="wide previous"; else order="previous wide"; fi
  for head in $order; do
    extra=""; [ $head = previous ] && extra="strategy.checkpoint=/tmp/old-head"
    .venv/bin/python -m specbench logger=none $extra 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/ab-$head-$i.txt
    echo "round $i $head: $(grep -E '^speedup \(|speed model|identical' $out/ab-$head-$i.txt | tr '\n' ' ')"
  done
done
