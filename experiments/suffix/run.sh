#!/usr/bin/env bash
# Acceptance lengths of suffix (chain, filled chain, tree) against ngram at the same k, on CPU (fp32, greedy,
# deterministic). Run from the repository root after `python experiments/suffix/make_prompts.py`.
# Results: outputs/suffix/<dataset>-<strategy>/results.json; experiments/suffix/table.py prints the tables.
set -euo pipefail
PY=${PY:-python}
common="logger=none baseline=false engine.batch_size=8 max_new_tokens=64"
declare -A DATA=(
  [humaneval]="dataset=humaneval dataset.num_prompts=30"
  [spec-bench]="dataset=jsonl dataset.name=spec-bench-2x13 dataset.path=outputs/suffix/spec-bench-2x13.jsonl dataset.field=turns dataset.num_prompts=null"
  [mt-bench]="dataset=mt-bench dataset.num_prompts=16"
  [repeat]="dataset=jsonl dataset.name=repeat-13x2 dataset.path=outputs/suffix/repeat-13x2.jsonl dataset.field=turns dataset.num_prompts=null"
)
declare -A STRATEGY=(
  [suffix]="strategy=suffix strategy.k=4"
  [suffix-fill]="strategy=suffix strategy.k=4 strategy.min_token_prob=0 strategy.max_spec_factor=4"
  [suffix-tree]="strategy=suffix strategy.k=4 strategy.tree=dynamic strategy.num_nodes=16"
  [ngram]="strategy=ngram strategy.k=4"
)
JOBS=${JOBS:-"humaneval:suffix humaneval:suffix-tree humaneval:ngram humaneval:suffix-fill
  repeat:suffix repeat:suffix-fill repeat:ngram repeat:suffix-tree
  spec-bench:suffix spec-bench:suffix-fill spec-bench:ngram
  mt-bench:suffix mt-bench:suffix-fill mt-bench:ngram"}
for job in $JOBS; do
  data=${job%%:*} s=${job##*:}
  [ -f outputs/suffix/$data-$s/results.json ] && continue
  echo "== $data $s"
  $PY -m specbench ${STRATEGY[$s]} ${DATA[$data]} $common output_dir=outputs/suffix/$data-$s 2>&1 | grep -v "tok/s" | tail -3
done
