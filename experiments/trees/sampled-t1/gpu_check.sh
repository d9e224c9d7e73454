python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD WANDB_MODE=disabled || exit
git log --oneline -1 2>/dev/null | head -1
timeout 120 python3 -m pytest -q -m gpu tests/kernels/test_tree_rejection_kernel.py 2>&1 | tail -2
timeout 150 python3 -m specbench -m logger=none target=qwen3-0.6b-random draft=self strategy=draft_model strategy.tree=dynamic strategy.top_k=1 strategy.num_nodes=3 strategy.k=3 sampling.temperature=0,1 dataset=builtin max_new_tokens=64 engine.ignore_eos=true hydra.sweep.dir=$OUT/self > $OUT/self.txt 2>&1; echo "self rc $?"
grep -E "acceptance length|identical|Error|graph" $OUT/self.txt | head -8
timeout 120 python3 -m specbench logger=none target=qwen3-1.7b-random draft=qwen3-0.6b-random strategy=draft_model strategy.tree=dynamic strategy.top_k=2 strategy.num_nodes=4 strategy.k=4 sampling.temperature=1 dataset=builtin max_new_tokens=64 engine.ignore_eos=true hydra.run.dir=$OUT/two > $OUT/two.txt 2>&1; echo "two rc $?"
grep -E "acceptance length|captures|Error|speedup \(" $OUT/two.txt | head -6
