# A/B through the CLI (frontdoor.sh block 3: 8B + 0.6B, batch 64, k=1, invariant then fastest kernels), this tree
# against the same tree with the invariant GEMM's tuning of 9981381, two rounds alternating, each run a fresh process.
# Before the device command: git show 9981381:specbench/kernels/skinny_gemm.py > experiments/gpu/_old_skinny_gemm.py
# (untracked, so it travels with the tree); then on the device: bash experiments/gpu/ab_tuning.sh  (results in $OUT)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
rm -rf /tmp/old && mkdir /tmp/old && cp -r specbench experiments conf pyproject.toml /tmp/old/ && cp experiments/gpu/_old_skinny_gemm.py /tmp/old/specbench/kernels/skinny_gemm.py
new=$PWD; t0=$(date +%s)
for round in 1 2; do
  for tree in new old; do
    [ $(( $(date +%s) - t0 )) -gt 380 ] && { echo "skip $tree $round (time)"; continue; }
    d=$new; [ $tree = old ] && d=/tmp/old
    (cd $d && export PYTHONPATH=/tmp/site:$d && s=$(date +%s) && BLOCKS=3 bash experiments/gpu/frontdoor.sh $OUT/$tree-$round > /dev/null 2>&1; echo "$tree round $round rc $? $(( $(date +%s) - s ))s")
  done
done
for f in $OUT/*/b64-8b.txt; do echo "== $f"; grep -E "^\| (metric|TPOT|decode tok/s|output tok/s|time:|acceptance length)|speedup|speed model|identical|Error|error" $f; done
