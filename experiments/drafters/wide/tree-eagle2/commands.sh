#!/usr/bin/env bash
# The shipped head (the tenth run's, main at 5f4bea1) in EAGLE-2's published tree size: the first three commands of
# ../../tree-eagle2/commands.sh, which measured the head before it (2-core CPU, AMD EPYC, fp32). From the repository
# root with the package installed; each job's results.json is copied beside this file.
out=${1:-/tmp/treeal-wide}
C="logger=none engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 dataset.num_prompts=null strategy=eagle_tree strategy.k_schedule=fixed"
# mtbench-t0-k6n60.json (with its target-only baseline: speedup and the identical-output check)
python -m specbench -m $C dataset=mt-bench strategy.k=6 strategy.top_k=10 strategy.num_nodes=60 sampling.temperature=0 hydra.sweep.dir=$out/k6n60 > $out-k6n60.log 2>&1
# humaneval-t0-k6n60.json
python -m specbench $C dataset=humaneval strategy.k=6 strategy.top_k=10 strategy.num_nodes=60 sampling.temperature=0 hydra.run.dir=$out/he-k6n60-t0 > $out-he-k6n60-t0.log 2>&1
# mtbench-t1-k6n60.json, humaneval-t1-k6n60.json (no baseline)
python -m specbench -m $C baseline=false dataset=mt-bench,humaneval strategy.k=6 strategy.top_k=10 strategy.num_nodes=60 sampling.temperature=1 hydra.sweep.dir=$out/k6n60-t1 > $out-k6n60-t1.log 2>&1
