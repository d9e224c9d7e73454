#!/usr/bin/env bash
# thirty-sixth session (2026-12-06), the Intel Xeon without AMX at efb0459's code (the row product): how many nodes
# the default's dynamic tree could verify now that a verify of 6-9 rows costs little more than one row here; one
# pass over the five shapes of experiments/cpu/amd-run16/ab_nodes.sh, one job at a time, nothing else running.
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2
clean() { tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$"; }
for cfg in "strategy.num_nodes=5 strategy.top_k=2" "strategy.num_nodes=6 strategy.top_k=2" "strategy.num_nodes=6 strategy.top_k=3" \
           "strategy.num_nodes=8 strategy.top_k=3" "strategy.num_nodes=4 strategy.top_k=2"; do
  n=nodes-$(echo $cfg | sed 's/strategy\.//g' | tr ' =' '__')
  .venv/bin/python -m specbench logger=none $cfg 2>&1 | clean > $out/$n.txt
  echo "$cfg: $(grep -E '^speedup \(|speed model|identical' $out/$n.txt | tr '\n' ' ')" | tee -a $out/nodes-summary.txt
done
