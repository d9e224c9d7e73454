#!/usr/bin/env bash
# Issue 15 (item 2) on one machine with two GPUs (the nvidia-h200-x2 device machine), through the CLI.
# Here, once (the device machine has no network; .whl/ travels with the working tree):
#   ../shared/device/fetch-wheels.sh hydra-submitit-launcher==1.2.0 submitit==1.5.4 cloudpickle==3.1.3
# There, in each call:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD && bash experiments/launchers/two_gpus.sh "$OUT" launcher     # 4 jobs, 2 at a time
#   (the same with `sequential`: the 4 jobs one after another in one process, the reference for the report)
set -u
out=${1:-/tmp/two_gpus}; mode=${2:-launcher}; mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
# 8B + 0.6B random weights at real sizes, k = 1..4, acceptance drawn at the per-position rate 0.7655 (AL 2.8 at k = 3)
jobs=(target=qwen3-8b-random draft=qwen3-0.6b-random strategy=draft_model strategy.k=1,2,3,4
      "verify.synthetic_per_position=[0.7655]" dataset=builtin max_new_tokens=128 logger=none engine.ignore_eos=true)
nvidia-smi --query-gpu=index,pci.bus_id,name --format=csv,noheader
if [ "$mode" = launcher ]; then
  # which process computes on which GPU, every 2 s while the sweep runs (pids match the jobs' "holds GPU" lines)
  ( while true; do nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader | sed "s/^/$(date +%T) /"
      sleep 2; done ) > "$out/compute-apps.txt" 2>&1 &
  watcher=$!
  start=$(date +%s)
  timeout 540 python3 -m specbench -m hydra/launcher=specbench_local hydra.launcher.gpus_per_node=2 "${jobs[@]}" \
    hydra.sweep.dir="$out/launcher" > "$out/launcher.txt" 2>&1
  echo "sweep exit code $?, $(( $(date +%s) - start )) s"
  kill "$watcher"
  grep -h "specbench: " "$out"/launcher/*/__main__.log | sort
  cut -d" " -f2- "$out/compute-apps.txt" | cut -d, -f1,2 | sort -u   # pid, GPU bus id: one GPU per job
  python3 -m specbench.report "$out/launcher"
else
  start=$(date +%s)
  timeout 540 python3 -m specbench -m "${jobs[@]}" hydra.sweep.dir="$out/sequential" > "$out/sequential.txt" 2>&1
  echo "sweep exit code $?, $(( $(date +%s) - start )) s"
  python3 -m specbench.report "$out/sequential"
fi
