#!/usr/bin/env bash
# thirty-eighth session (2026-12-06), the Intel Xeon without AMX, main at b3c557a (the row product takes 16 rows a
# pass since 8acd16a): the default job with the dynamic tree's size and branching in turns, one job at a time,
# nothing else running, rounds FIRST..ROUNDS (default 1..2) over CONFIGS (default below; the first is the shipped default).
#   bash experiments/cpu/intel-noamx-run3/nodes_turns.sh
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run3
clean() { tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$"; }
IFS=';' read -ra configs <<< "${CONFIGS:-num_nodes=5 top_k=2;num_nodes=6 top_k=3;num_nodes=8 top_k=3;num_nodes=10 top_k=3}"
for round in $(seq "${FIRST:-1}" "${ROUNDS:-2}"); do
  for cfg in "${configs[@]}"; do
    n=nodes-$(echo $cfg | tr ' =' '__')-$round
    start=$(date +%s)
    .venv/bin/python -m specbench logger=none $(for c in $cfg; do echo "strategy.$c"; done) hydra.run.dir=/tmp/nodes-turns/$n 2>&1 | clean > $out/$n.txt
    echo "$cfg round $round ($(( $(date +%s) - start )) s): $(grep -E '^speedup \(|speed model|identical' $out/$n.txt | tr '\n' ' ')" | tee -a $out/nodes-turns.txt
  done
done
