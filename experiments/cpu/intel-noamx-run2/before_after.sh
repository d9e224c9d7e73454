#!/usr/bin/env bash
# thirty-sixth session (2026-12-06), the Intel Xeon with AVX512-BF16 and no AMX again (float32 default, tree drafted).
# The README's first job (`python -m specbench`, logger=none) before and after the "rows" product form
# (kernels/cpu_rows.py), in turns, one process at a time, nothing else running: "before" runs in a clone of main before
# the change (BEFORE, f47a3b4: `python -m` puts the working directory first on the path), "after" in this checkout,
# both on this checkout's venv. Then the chain (eagle_adaptive) after. (after-0.txt: a first "after" run, made when
# this script still ran "before" from here with PYTHONPATH, which `-m` overrides; its results.json lists "rows" forms.)
#   git clone -q . /tmp/before && git -C /tmp/before checkout -q f47a3b4
#   BEFORE=/tmp/before bash experiments/cpu/intel-noamx-run2/before_after.sh
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2
here=$PWD
run() {  # name, then the directory to run in
  local name=$1
  (cd "$2" && "$here/.venv/bin/python" -m specbench logger=none ${STRATEGY:+strategy=$STRATEGY} 2>&1) | tr '\r' '\n' \
    | grep -vE "it/s\]|tok/s\]|^\s*$" > $out/$name.txt
  echo "$name: $(grep -E '^speedup \(|speed model|identical' $out/$name.txt | tr '\n' ' ')"
}
run before-1 "$BEFORE"
run after-1 "$here"
run after-2 "$here"
run before-2 "$BEFORE"
STRATEGY=eagle_adaptive run after-chain-1 "$here"
