#!/usr/bin/env bash
# AL against the response's length on the CPU (fp32, batch 16): a chain at k = 3 (EAGLE's unless STRATEGY says; K sets k), up to 1024 new tokens,
# stopping at EOS as EAGLE's own MT-Bench evaluation does (its gen_ea_answer_*.py: --max-new-token 1024 by default).
# EXTRA adds overrides. HEAD (default the shipped head), SET (mt-bench or humaneval), T (temperature, default 0) and OUT (the sweep
# directory) pick the job. The forty-ninth session's jobs (experiments/drafters/README.md, "AL against the length of
# the response"), each with OUT=/tmp/len/<name> and its job's results.json and outputs.jsonl (gzipped) kept in cpu/<name>/:
#   shipped-mt     HEAD=eagle-smollm2-135m SET=mt-bench
#   s1-mt          HEAD=<deep2-target-s1/checkpoint> SET=mt-bench     (the 2-layer head of seed 1; not committed:
#                                                                       experiments/drafters/README.md rebuilds it)
#   shipped-he     HEAD=eagle-smollm2-135m SET=humaneval
#   s0-mt          HEAD=<deep2-target/checkpoint> SET=mt-bench        (the 2-layer head of seed 0; fiftieth session)
#   s1-he          HEAD=<deep2-target-s1/checkpoint> SET=humaneval    (fiftieth session)
#   tree5-mt       STRATEGY=eagle_tree K=4 SET=mt-bench   (the default's dynamic tree of 5 nodes, the shipped head; fiftieth session)
#   tree60-mt      STRATEGY=eagle_tree K=6 SET=mt-bench EXTRA="strategy.k_schedule=fixed strategy.top_k=10 strategy.num_nodes=60
#                  engine.scheduler=continuous"   (EAGLE-2's tree size, the shipped head; fifty-second session, AMD EPYC.
#                  The fifty-first session's static run fell from 28 to 3.7 tokens a second, as a batch's short
#                  responses ended and their rows were still verified beside the long ones, and was stopped at 39%;
#                  with the continuous scheduler a finished row's slot takes the next prompt: 2194 s in all. Its 80
#                  responses are token for token the other MT-Bench T=0 jobs'.)
#   tree60-he      the same with SET=humaneval (fifty-third session, AMD EPYC, from a clone of 2d4843c: 3753 s, the
#                  last ~10 min one or two rows looping to 1024 tokens beside 14 idle slots, and beside another CPU
#                  job; its 164 responses are
#                  token for token shipped-he's and s1-he's, 65922 tokens)
#   tree5-he       STRATEGY=eagle_tree K=4 SET=humaneval EXTRA=engine.scheduler=continuous   (the default's tree on
#                  HumanEval; fifty-third session, AMD EPYC, 864 s; the same tokens as shipped-he, 65922)
#   shipped-mt-t1  HEAD=eagle-smollm2-135m SET=mt-bench T=1
#   ngram-mt, suffix-mt  STRATEGY=ngram / STRATEGY=suffix (drafters that copy; HEAD unused), SET=mt-bench
# (As run: shipped-mt without strategy.checkpoint, i.e. the default's `auto`, which resolved to the shipped head;
# shipped-he and shipped-mt-t1 with a copy of it outside the package; all three name weights of the same sha256,
# 096a82d3..., in their results.json.)
# Then: python experiments/drafters/length/analyze.py experiments/drafters/length/cpu [--by-category]
#       python -m specbench.report experiments/drafters/length/cpu --against experiments/drafters/length/cpu/shipped-mt
set -euo pipefail
HEAD=${HEAD:-eagle-smollm2-135m}
OUT=${OUT:?the sweep directory}
STRATEGY=${STRATEGY:-eagle}
head=(); [[ $STRATEGY == eagle* ]] && head=(strategy.checkpoint=$HEAD)
python -m specbench -m logger=none baseline=false engine.batch_size=16 max_new_tokens=${TOKENS:-1024} engine.dtype=float32 \
  dataset=${SET:-mt-bench} dataset.num_prompts=null strategy=$STRATEGY strategy.k=${K:-3} sampling.temperature=${T:-0} \
  "${head[@]}" ${EXTRA:-} hydra.sweep.dir=$OUT 'hydra.sweep.subdir=${hydra.job.num}'
