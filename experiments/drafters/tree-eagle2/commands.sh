cd /work/main && . .venv/bin/activate
C="logger=none engine.batch_size=16 max_new_tokens=64 engine.dtype=float32 dataset.num_prompts=null strategy=eagle_tree strategy.k_schedule=fixed"
python -m specbench $C dataset=humaneval strategy.k=6 strategy.top_k=10 strategy.num_nodes=60 sampling.temperature=0 hydra.run.dir=/tmp/treeal/he-k6n60-t0 > /tmp/treeal/he-k6n60-t0.log 2>&1
python -m specbench -m $C baseline=false dataset=mt-bench,humaneval strategy.k=6 strategy.top_k=10 strategy.num_nodes=60 sampling.temperature=1 hydra.sweep.dir=/tmp/treeal/k6n60-t1 > /tmp/treeal/k6n60-t1.log 2>&1
python -m specbench -m $C baseline=false dataset=mt-bench strategy.k=5 strategy.top_k=8 strategy.num_nodes=16,32 sampling.temperature=0 hydra.sweep.dir=/tmp/treeal/sizes > /tmp/treeal/sizes.log 2>&1
