#!/usr/bin/env bash
# thirty-third session (2026-12-06, AMD EPYC, float32, main at 6545903 with eagle_auto's 4 nodes): how many nodes the
# default's dynamic tree should verify with the tenth run's head. Run from the project root, one job at a time,
# nothing else running. Each job runs target-only decoding and the strategy in turns (its own baseline).
out=experiments/cpu/amd-run16
clean() { tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$"; }
# 1) one pass over five shapes (summary.txt, strategy.num_nodes_*_strategy.top_k_*.txt)
for cfg in "strategy.num_nodes=4 strategy.top_k=2" "strategy.num_nodes=6 strategy.top_k=2" "strategy.num_nodes=6 strategy.top_k=3" \
           "strategy.num_nodes=8 strategy.top_k=3" "strategy.num_nodes=5 strategy.top_k=2"; do
  n=$(echo $cfg | tr ' =' '__')
  .venv/bin/python -m specbench logger=none $cfg 2>&1 | clean > $out/$n.txt
  echo "$cfg: $(grep -E '^speedup \(|speed model|identical' $out/$n.txt | tr '\n' ' ')" >> $out/summary.txt
done
# 2) 4 against 5 nodes in four rounds, the order reversed every other round (ab.txt, ab-n*-r*.txt)
for round in 1 2 3 4; do
  if [ $((round % 2)) = 1 ]; then order="4 5"; else order="5 4"; fi
  for n in $order; do
    .venv/bin/python -m specbench logger=none strategy.num_nodes=$n 2>&1 | clean > $out/ab-n$n-r$round.txt
    echo "n=$n round $round: $(grep -E '^speedup \(|speed model|identical' $out/ab-n$n-r$round.txt | tr '\n' ' ')" >> $out/ab.txt
  done
done
# 3) acceptance on all 80 MT-Bench first turns, strategy only (all80-n*.txt)
for n in 4 5; do
  .venv/bin/python -m specbench logger=none baseline=false dataset.num_prompts=null strategy.num_nodes=$n 2>&1 | clean \
    > $out/all80-n$n.txt
done
