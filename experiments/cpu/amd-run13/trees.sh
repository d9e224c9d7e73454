#!/usr/bin/env bash
# AMD EPYC (float32): tree sizes in turns with the default, one process at a time
cd /work/main
for round in 1 2; do
  for s in "eagle_tree" "eagle_tree strategy.num_nodes=8" "eagle_tree strategy.num_nodes=8 strategy.top_k=4" "eagle_tree strategy.num_nodes=12 strategy.top_k=4" "eagle_tree strategy.num_nodes=16 strategy.top_k=4 strategy.k=6"; do
    tag=$(echo "$s" | tr ' =' '_-' | sed 's/strategy\.//g')
    .venv/bin/python -m specbench logger=none strategy=$s > /tmp/amd/tree-$tag-$round.txt 2>&1
    echo "$tag $round: $(grep -E '^speedup \(|speed model|identical' /tmp/amd/tree-$tag-$round.txt | cut -c1-200 | tr '\n' ' ')"
  done
done
