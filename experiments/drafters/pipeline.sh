#!/usr/bin/env bash
# The runs behind specbench/checkpoints/{eagle,medusa}-smollm2-135m and experiments/drafters/table/ (2026-12-01),
# on one H200 (the device machine: no network, 10 minutes a command). Run from the project root:
#   bash experiments/drafters/pipeline.sh train   # magpie prompts, distillation set, EAGLE head
#   bash experiments/drafters/pipeline.sh more    # Medusa heads, distilled draft model, the evaluation table
#   bash experiments/drafters/pipeline.sh train2  # steered magpie prompts, a second EAGLE head on all the prompts
#   bash experiments/drafters/pipeline.sh vocab   # 2 responses per prompt, reduced draft vocabulary 16k (then vocab2: 8k, full)
#   bash experiments/drafters/pipeline.sh eagle3  # vocab's data and head, with EAGLE-3's fusion of target layers 2, 15, 27
#   bash experiments/drafters/pipeline.sh evals-data  # vocab's data plus human-written openai-evals requests (call 1 of 2)
#   bash experiments/drafters/pipeline.sh evals   # (call 2) the shipped head's recipe on that set, then both heads' AL
#   bash experiments/drafters/pipeline.sh soft    # (call 2 instead) that recipe with soft labels, then both heads' AL
#   bash experiments/drafters/pipeline.sh nofeat  # (call 2 instead) soft's recipe without the feature loss (EAGLE-3)
#   bash experiments/drafters/pipeline.sh long    # (call 2 instead) soft's recipe on a 1.5x schedule (9000 steps)
#   bash experiments/drafters/pipeline.sh arena-data  # evals-data's set plus Arena-Hard's 430 requests x ARENA_X (calls 1, 2)
#   bash experiments/drafters/pipeline.sh arena   # (call 3) soft's recipe on that set, then both heads' AL
#   bash experiments/drafters/pipeline.sh magpie-more  # two more magpie sets (seeds 2 and 3, the second steered)
#   bash experiments/drafters/pipeline.sh wide-data  # evals-data's set plus those two sets (calls 1, 2)
#   bash experiments/drafters/pipeline.sh wide    # (call 3) soft's recipe on that set, then the new head's AL
#   bash experiments/drafters/pipeline.sh mlp     # (call 3 instead) wide's recipe with a wider MLP (MLP_WIDTH, MLP_VOCAB)
#   bash experiments/drafters/pipeline.sh twice-data  # wide's set plus magpie-more's seeds 4-7 (MAGPIE_SEEDS), then twice
#   bash experiments/drafters/pipeline.sh aligned # (after wide-data) wide's recipe with GRIFFIN's aligned unroll (ALIGNED_RUNS)
#   bash experiments/drafters/pipeline.sh ft      # (after wide-data) fine-tunes of one head (FT_FROM, FT_RUNS)
#   bash experiments/drafters/pipeline.sh deep    # (after wide-data) wide's recipe with more decoder layers (DEEP_LAYERS)
# The EAGLE heads before the soft stage were trained on the target's top-1 (strategy.soft_labels=false, the
# default until 2026-12-03): their stages say so, so they still make the same heads.
# Every stage has a time budget, so a command ends inside its limit; what a budget cut is printed with the
# setting that reproduces it (data.max_shards, train.stop_after). SMOKE=1 runs the same commands at toy
# sizes on the CPU (a check before spending device time).
#
# What travels (the tree limit is 64 MiB a call, the packaged GGUF is 98 MB): `device_tree.sh stage` splits the GGUF
# in two parts (.cache/gpu/a/part_aa, .cache/gpu/b/part_ab) and copies the data files into .cache/gpu/b/data/;
# `device_tree.sh strip` moves the shipped checkpoints' weights and the rest of experiments/ out of the checkout (no
# stage reads them), so that each part travels in a call of its own with .whl/ (../shared/device/fetch-wheels.sh);
# `restore` puts them back. The device keeps ignored paths between calls while it stays warm, and the stage joins
# the parts in name order. data/ holds MT-Bench's and HumanEval's files (for the contamination check) and
# Spec-Bench's question.jsonl. device_tree.sh's header lists the calls of the arena run. (Until 2026-12-05 the GGUF
# went in three parts of 33 MB with only the checkpoints' weights moved out; the stage joins either.)
set -euo pipefail
stage=${1:?usage: pipeline.sh train|more|train2|vocab|vocab2|eagle3|evals-data|evals|soft|nofeat|long|arena-data|arena|magpie-more|wide-data|wide|mlp|twice-data|twice|aligned|ft|deep}
DEADLINE=$((SECONDS + ${DEADLINE_S:-570}))  # the evaluation stops starting new sweeps past this
G=$PWD/.cache/gpu
RUN=$G/run
OUT=${OUT:-$RUN/out}
mkdir -p "$RUN" "$OUT"
export PYTHONUNBUFFERED=1 SPECBENCH_CACHE=$G/cache
if [ "${SMOKE:-0}" = 1 ]; then
  export SPECBENCH_CACHE=${SMOKE_CACHE:-$HOME/.cache/specbench}
  DEV=cpu; MAGPIE=6; MAGPIE_BS=6; DATA_BS=4; NEW=8; MAXP=256; TB=4; EB=8; STEPS=6; NP="dataset.num_prompts=3"; KS=1,2
  EXTRA="data.num_prompts=16"; VAL=2; SAVE=3; GEN=8
  SPEC=../shared/data/spec_bench/question.jsonl
else
  DEV=cuda; MAGPIE=6000; MAGPIE_BS=512; DATA_BS=384; NEW=192; MAXP=512; TB=32; EB=164; STEPS=1200; NP="dataset.num_prompts=null"; KS=1,2,3,4,5
  EXTRA=""; VAL=64; SAVE=500; GEN=64
  SPEC=$G/b/data/question.jsonl
  if [ ! -d /tmp/site/hydra ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  export PYTHONPATH=/tmp/site:$PWD
  mkdir -p "$SPECBENCH_CACHE/gguf" "$SPECBENCH_CACHE/data"
  gguf=$SPECBENCH_CACHE/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -f "$gguf" ]; then
    # its parts in name order (part_aa, part_ab, ...), whichever of a/, b/, c/ each came in
    ls "$G"/?/part_a? | awk -F/ '{print $NF, $0}' | sort | cut -d' ' -f2 | xargs cat > "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
  fi
  echo "a1231443440b107ff29f02bdb38c9d0a  $gguf" | md5sum -c -
  cp -n "$G/b/data/mt_bench_question.jsonl" "$G/b/data/HumanEval.jsonl.gz" "$SPECBENCH_CACHE/data/"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
fi
# SWEEP_TOKENS=n (forty-ninth session): the AL sweeps' max_new_tokens (default 64 on a GPU, 8 in SMOKE); each job's
# outputs.jsonl records every step's tokens, so `specbench.report` gives AL by position in the response
GEN=${SWEEP_TOKENS:-$GEN}
py() { python3 "$@" 2>&1 | tr '\r' '\n' | grep -v -E "it/s\]$|s/it\]$|prompt/s\]$|seq/s\]$|tok/s\]$"; }
PROMPTS=$RUN/magpie.jsonl.gz
COMMON="target=smollm2-135m device=$DEV logger=none seed=0
  data.path=[$PROMPTS,$PWD/experiments/drafters/prompts/python_stdlib.jsonl.gz,$SPEC] data.cache_dir=$RUN/distill
  data.max_prompt_tokens=$MAXP data.max_new_tokens=$NEW data.samples=1 data.batch_size=$DATA_BS
  train.ce_vocab=0 train.ce_positions=0 train.val_sequences=$VAL train.save_every=$SAVE save_dtype=float16 $EXTRA
  train.precision=${TRAIN_PRECISION:-float32}"
# train.precision: every stage here trained in float32 (the default until 2026-12-08; now auto: bf16 for EAGLE heads
# on CUDA), so its commands make the same heads; TRAIN_PRECISION=bfloat16 trains a stage's runs in bf16 (see TRAIN_SEED)
# DATA_DTYPE=bfloat16 (thirty-ninth session): the set written by the target in bfloat16 on the decode engine's path
# (data.dtype; its shards live apart from float32's): pass it to the data calls and to the training call alike
[ -n "${DATA_DTYPE:-}" ] && COMMON="$COMMON data.dtype=$DATA_DTYPE"
# EXPORT_RESPONSES=<file> (forty-eighth session): the run writes the responses of the shards it used there
# (data.export_responses, token ids, compressed); RESPONSES=<that file>: a later machine makes the set from them by one
# prefill of each sequence instead of decoding them (data.responses; the same prompts and data settings, DATA_DTYPE
# included). Pass RESPONSES to every call that reads the set, as DATA_DTYPE
[ -n "${EXPORT_RESPONSES:-}" ] && COMMON="$COMMON data.export_responses=$EXPORT_RESPONSES"
[ -n "${RESPONSES:-}" ] && COMMON="$COMMON data.responses=$RESPONSES"

if [ "$stage" = train ]; then
  # 1) the target writes its own user requests (magpie), checked free of MT-Bench / HumanEval text
  [ -f "$PROMPTS" ] || py -m specbench.train.prompts --out "$PROMPTS" --device $DEV --magpie $MAGPIE --code 0 \
      --batch-size $MAGPIE_BS --magpie-time-budget 75 | tee "$OUT/prompts.log" | tail -3
  cp "$PROMPTS" "$OUT/"
  # 2) distillation set (cached under $RUN/distill for the other drafters) and 3) the EAGLE head
  py -m specbench.train strategy=eagle strategy.unroll=3 strategy.soft_labels=false train.batch_size=$TB train.steps=$STEPS train.lr=6e-4 \
      train.warmup=100 data.time_budget_s=210 train.time_budget_s=150 $COMMON output_dir=$RUN/eagle \
      | tee "$OUT/eagle.log" | tail -6
  cp -r "$RUN/eagle/checkpoint" "$OUT/eagle" && cp "$RUN/eagle/metrics.jsonl" "$OUT/eagle_metrics.jsonl"
fi

if [ "$stage" = train2 ]; then
  # the first magpie set (committed: experiments/drafters/prompts/) plus requests steered by a task verb
  STEERED=$RUN/magpie_steered.jsonl.gz
  [ -f "$STEERED" ] || py -m specbench.train.prompts --out "$STEERED" --device $DEV --magpie $MAGPIE --code 0 --seed 1 \
      --magpie-openers --batch-size $MAGPIE_BS --magpie-time-budget 60 | tee "$OUT/prompts_steered.log" | tail -3
  cp "$STEERED" "$OUT/"
  P=$PWD/experiments/drafters/prompts
  py -m specbench.train strategy=eagle strategy.unroll=3 strategy.soft_labels=false train.batch_size=$TB train.steps=$((STEPS * 5 / 4)) train.lr=6e-4 \
      train.warmup=100 data.time_budget_s=180 train.time_budget_s=110 $COMMON data.max_new_tokens=$((NEW * 2 / 3)) \
      "data.path=[$P/magpie_smollm2-135m.jsonl.gz,$STEERED,$P/python_stdlib.jsonl.gz,$SPEC]" output_dir=$RUN/eagle2 \
      | tee "$OUT/eagle2.log" | tail -6
  cp -r "$RUN/eagle2/checkpoint" "$OUT/eagle2" && cp "$RUN/eagle2/metrics.jsonl" "$OUT/eagle2_metrics.jsonl"
fi

if [ "$stage" = vocab ] || [ "$stage" = vocab2 ]; then
  # 2026-12-02 (issue 13): two responses per prompt (greedy + one at T=0.7) on all committed prompt sets, a longer
  # schedule, and EAGLE-3's reduced draft vocabulary (strategy.draft_vocab) at 8192 (vocab), 4096 and the full
  # vocabulary (vocab2, on the same cached data: data.time_budget_s=0 generates nothing new). 16384 would make a
  # 27 MB fp16 checkpoint, over what we ship. Each run comes back as <name>.tgz in parts of at most 15 MB
  P=$PWD/experiments/drafters/prompts
  V="strategy=eagle strategy.unroll=3 strategy.soft_labels=false train.batch_size=$TB train.steps=$((STEPS * 10 / 3)) train.lr=6e-4 train.warmup=100
     train.time_budget_s=215 $COMMON data.max_new_tokens=128 data.samples=2 data.temperature=0.7 data.cache_dir=$RUN/distill2
     data.path=[$P/magpie_smollm2-135m.jsonl.gz,$P/magpie_steered_smollm2-135m.jsonl.gz,$P/python_stdlib.jsonl.gz,$SPEC]"
  if [ "$stage" = vocab ]; then runs="v8k:8192"; budget=270; else runs="v4k:4096 vfull:null"; budget=0; fi
  for r in $runs; do
    name=${r%%:*}
    py -m specbench.train $V strategy.draft_vocab=${r#*:} data.time_budget_s=$budget output_dir=$RUN/$name \
      | tee "$RUN/$name.log" | grep -v "train eagle:" | tail -8
    tar czf "$RUN/$name.tgz" -C "$RUN" "$name.log" "$name/checkpoint" "$name/metrics.jsonl"
    split -b 15M "$RUN/$name.tgz" "$OUT/$name.tgz.part_"
  done
fi

if [ "$stage" = eagle3 ]; then
  # 2026-12-02 (issue 13 item 1): the shipped head's recipe (vocab: the same prompts, 2 responses per prompt,
  # draft vocabulary 8192, 3-step training-time test, 4000 steps) with EAGLE-3's input: the target's layers 2, 15
  # and 27 of 30 (low / middle / high, as formats.py picks them for a 30-layer target) fused by a linear layer
  # instead of its final-norm feature. The distillation set is made again: it must hold those layers' outputs.
  P=$PWD/experiments/drafters/prompts
  py -m specbench.train strategy=eagle strategy.unroll=3 strategy.soft_labels=false "strategy.fuse_layers=[2,15,27]" strategy.draft_vocab=8192 \
      train.batch_size=$TB train.steps=$((STEPS * 10 / 3)) train.lr=6e-4 train.warmup=100 train.time_budget_s=215 \
      $COMMON data.max_new_tokens=128 data.samples=2 data.temperature=0.7 data.cache_dir=$RUN/distill3 \
      "data.path=[$P/magpie_smollm2-135m.jsonl.gz,$P/magpie_steered_smollm2-135m.jsonl.gz,$P/python_stdlib.jsonl.gz,$SPEC]" \
      data.max_shards=${MAX_SHARDS:-32} data.time_budget_s=${DATA_BUDGET_S:-300} output_dir=$RUN/e3 \
      | tee "$RUN/e3.log" | grep -v "train eagle:" | tail -8
  tar czf "$RUN/e3.tgz" -C "$RUN" e3.log e3/checkpoint e3/metrics.jsonl
  split -b 15M "$RUN/e3.tgz" "$OUT/e3.tgz.part_"
fi

if [ "$stage" = evals-data ] || [ "$stage" = evals ] || [ "$stage" = soft ] || [ "$stage" = nofeat ] || [ "$stage" = long ] \
    || [ "$stage" = arena-data ] || [ "$stage" = arena ] || [ "$stage" = wide-data ] || [ "$stage" = wide ] \
    || [ "$stage" = mlp ] || [ "$stage" = twice-data ] || [ "$stage" = twice ] || [ "$stage" = aligned ] \
    || [ "$stage" = ft ] || [ "$stage" = deep ]; then
  # (issue 13 item 3) the shipped head's recipe (vocab: 2 responses per prompt, draft vocabulary 8192, 3-step
  # training-time test) on its prompts plus 10,635 human-written requests from OpenAI's evals registry
  # (prompts/openai_evals.jsonl.gz, `python -m specbench.train.prompts --magpie 0 --code 0 --evals -1`). The set is
  # ~64 shards, more than one command makes: evals-data generates shards for DATA_BUDGET_S (one training step, thrown
  # away), evals generates none (data.time_budget_s=0: the shards made so far, a seeded random subset, are used),
  # trains, then measures the new head and the shipped one in one sweep (fp32, k=3, T=0, all of MT-Bench's first
  # turns and HumanEval, as the eagle3 table was). The machine must stay warm between the two calls.
  # evals-data's budget is what is left of DEADLINE_S less 45 s (the process's start, and the shard it is making when
  # the budget ends); a second evals-data call goes on from the shards already made. With DATA_BUDGET_S=555 and the
  # device's 600 s limit, the eighth run's call was killed at 55 of 64 shards (2026-12-04).
  P=$PWD/experiments/drafters/prompts
  # arena-data / arena (twenty-second session, 2026-12-04; ran on an H100 on 2026-12-05: README, "Ninth run"): the
  # same set plus Arena-Hard v2.0's 430
  # human-written requests (prompts/arena_hard.jsonl.gz; 136 creative writing, 164 coding, 130 math), listed ARENA_X
  # times so that they weigh more than 1% of the set: each copy's sampled response is a draw of its own, its greedy
  # one repeats. The head agrees with the target on them about as little as on MT-Bench
  # (experiments/drafters/README.md, "Arena-Hard's requests"), so they are the kind the training set lacks.
  # wide-data / wide (twenty-ninth session, 2026-12-05; run in the thirty-first: the tenth run, shipped): the same set plus the target's own requests of
  # magpie-more (22,460: seeds 2 and 3), so about twice the prompts; the question the ninth run left: does a wider
  # spread of the target's own requests carry over to MT-Bench where Arena's 430 did not? The set is 122 shards; two
  # data calls on an H100 made all of them (~7 s a shard there; had they not, a seeded subset of those made is used)
  # SAMPLES (fortieth session; default 2, every head so far): responses per prompt, the greedy one and SAMPLES - 1 at
  # T = 0.7, for the question of a set twice as large from the same prompts (SAMPLES=4: ~244 shards of wide-data, about
  # 470 s on an H100 in bfloat16); pass it to the data and the training calls alike (the set's cache key holds it)
  more=""; cache=distill4; seeds=""
  case $stage in
    arena-data|arena) for _ in $(seq "${ARENA_X:-4}"); do more="$more,$P/arena_hard.jsonl.gz"; done; cache=distill5 ;;
    wide-data|wide|mlp|aligned|ft|deep) seeds="2 3"; cache=distill6 ;;
    # twice-data / twice (forty-first session): wide's set plus magpie-more's seeds 4-7 (MAGPIE_SEEDS below), about
    # twice wide's prompts again: the tenth run's lever (+2.3% for a doubling of the target's own requests), once more
    twice-data|twice) seeds="2 3 4 5 6 7"; cache=distill7 ;;
  esac
  for s in $seeds; do  # magpie-more's sets: committed, or made on this machine and not committed yet
    f=$P/magpie_seed${s}_smollm2-135m.jsonl.gz
    [ -f "$f" ] || f=$RUN/more/magpie_seed${s}_smollm2-135m.jsonl.gz
    more="$more,$f"
  done
  EV="strategy=eagle strategy.unroll=3 strategy.soft_labels=false strategy.draft_vocab=8192 train.batch_size=$TB train.lr=6e-4 train.warmup=100
      $COMMON data.max_new_tokens=128 data.samples=${SAMPLES:-2} data.temperature=0.7 data.cache_dir=$RUN/$cache
      data.path=[$P/magpie_smollm2-135m.jsonl.gz,$P/magpie_steered_smollm2-135m.jsonl.gz,$P/python_stdlib.jsonl.gz,$P/openai_evals.jsonl.gz,$SPEC$more]"
  if [ "$stage" = evals-data ] || [ "$stage" = arena-data ] || [ "$stage" = wide-data ] || [ "$stage" = twice-data ]; then
    py -m specbench.train $EV train.steps=$((STEPS * 10 / 3)) train.stop_after=1 \
        data.time_budget_s=${DATA_BUDGET_S:-$((DEADLINE - SECONDS - 45))} output_dir=$RUN/$stage | grep -E "^distillation" | tail -4
  elif [ "$stage" = soft ] || [ "$stage" = nofeat ] || [ "$stage" = long ] || [ "$stage" = arena ] || [ "$stage" = wide ] \
      || [ "$stage" = mlp ] || [ "$stage" = twice ] || [ "$stage" = aligned ] || [ "$stage" = ft ] \
      || [ "$stage" = deep ]; then
    # 2026-12-03 (twelfth session): the shipped head's exact recipe (evals: this set, 6000 steps, seed 0) with one
    # change, strategy.soft_labels=true: the token loss is a cross-entropy to the target's distribution over the draft
    # vocabulary (its LM head over the cached final-norm feature), as EAGLE and EAGLE-3 train, not to its top-1. Then
    # both heads in one sweep: the chain at T = 0 and T = 1, and EAGLE-2's dynamic tree at T = 0.
    # AB=1 (when the data set is smaller than the shipped head's): train a top-1 head too, same data and steps.
    # nofeat (2026-12-04, twentieth session): soft's recipe (the shipped head's) with one change, strategy.w_feature=0:
    # no smooth-L1 loss on the head's output feature, only the token loss, as EAGLE-3 trains (its training-time test
    # feeds the head its own outputs, so they need not imitate the target's features)
    heads=${BASE_HEADS-eagle-smollm2-135m}  # BASE_HEADS= : only the new head (a call that left the checkpoints out)
    runs="soft:strategy.soft_labels=true ${AB:+hard:strategy.soft_labels=false}"
    [ "$stage" = nofeat ] && runs="nofeat:strategy.w_feature=0"
    # long (2026-12-04, twenty-first session): soft's recipe with one change, 9000 steps instead of 6000 (the
    # validation agreement of the sixth run was still rising at its end); the warm-up and schedule are the same
    # settings, stretched over the longer run by train.steps
    [ "$stage" = long ] && runs="long:" && EVALS_STEPS=${EVALS_STEPS:-$((STEPS * 15 / 2))}
    # arena: soft's recipe (the shipped head's), the data its only change
    [ "$stage" = arena ] && runs="arena:"
    [ "$stage" = wide ] && runs="wide:"  # the same: the data its only change
    [ "$stage" = twice ] && runs="twice:"  # the same again, on twice-data's set
    # mlp (thirty-fourth session, 2026-12-06): wide's recipe and data (the shipped head's) with a wider MLP, the
    # capacity question the tenth run left (its training and validation agreement were close). The shipped head's
    # 8.93 M parameters take 17.9 MB in fp16, 4.72 M of them its draft vocabulary's LM head; with the target's LM head
    # shared (MLP_VOCAB=null: 8.4 MB before, AL within 0.01 of 8192's in the second run) an MLP of 4608 (3x) takes
    # 19.0 MB, under the 20 MB a committed checkpoint may. MLP_VOCAB=8192 MLP_WIDTH=3072 (23.2 MB) asks the same
    # question at the shipped vocabulary
    w=${MLP_WIDTH:-4608} n=${MLP_VOCAB:-null}  # ';' parts one run's overrides
    [ "$stage" = mlp ] && runs="mlp$w-v$n:strategy.intermediate_size=$w;strategy.draft_vocab=$n"
    # deep (forty-fourth session, 2026-12-07): wide's recipe and data (the shipped head's) with DEEP_LAYERS decoder
    # layers (default 2; strategy.num_layers), the capacity question by depth: the MLP twice as wide took +2.1%, and
    # the probes put the first draft's agreement, not the drafting, between the chain and 2.2. A second layer adds
    # 3.54 M parameters (25 MB in fp16 with the 8192-id LM head: over the 20 MB a committed checkpoint may)
    # DEEP_LM_HEAD=target: the draft vocabulary's logits from the target's LM head rows (strategy.draft_lm_head), not
    # saved: 2 layers then take 15.5 MB, under the 20 MB
    [ "$stage" = deep ] && runs="deep${DEEP_LAYERS:-2}-${DEEP_LM_HEAD:-own}:strategy.num_layers=${DEEP_LAYERS:-2};strategy.draft_lm_head=${DEEP_LM_HEAD:-own}"
    # aligned (forty-second session, 2026-12-06): wide's recipe and data with one change, strategy.aligned_unroll=true
    # (GRIFFIN's token alignment: unrolled step j trains only where steps 1..j-1 drafted the tokens it is fed), and
    # the same recipe without it (plain) on the same set, so the pair differs in that setting alone. ALIGNED_RUNS says
    # which to train in this call (default both, one after the other); NO_SWEEP=1 skips the sweep (a call that trains
    # one head, with the next call's BASE_HEADS naming its checkpoint). Do not start two of these at once on one
    # machine: in the forty-second session two trainings side by side ran at 1.9 steps a second each, against 20-24
    # for one alone (experiments/drafters/README.md, "GRIFFIN's token alignment")
    if [ "$stage" = aligned ]; then
      runs=""
      for r in ${ALIGNED_RUNS:-aligned plain}; do
        case $r in aligned) runs="$runs aligned:strategy.aligned_unroll=true" ;; plain) runs="$runs plain:" ;;
          *) echo "ALIGNED_RUNS: $r; allowed: aligned, plain"; exit 2 ;; esac
      done
    fi
    # ft (forty-third session): fine-tunes of one head on wide's set, FT_RUNS="name:override[;override...] ..." (default
    # "plain:", the head's own recipe), from FT_FROM (default the shipped head). A fine-tune of the shipped head takes
    # ~75 s on an H100 (21 steps a second), so one call screens several settings against each other and against the
    # shipped head in one sweep, e.g. FT_RUNS="plain: noise:strategy.feature_noise=0.1 unroll4:strategy.unroll=4"
    [ "$stage" = ft ] && runs=${FT_RUNS:-plain:} && FT_FROM=${FT_FROM:-eagle-smollm2-135m}
    # FT_FROM=<checkpoint> with aligned or ft: each run as a fine-tune of that head (strategy.init_from: its weights
    # and draft vocabulary), FT_STEPS steps at FT_LR (default 1500, at 2e-4 with a warm-up of 50); a run's own
    # overrides come last, so they win. aligned's pair so (forty-third session) starts where the alignment is meant
    # to work, and the plain fine-tune controls for the extra steps
    if [ -n "${FT_FROM:-}" ] && { [ "$stage" = aligned ] || [ "$stage" = ft ]; }; then
      ft="strategy.init_from=$FT_FROM;train.lr=${FT_LR:-2e-4};train.warmup=50"
      runs=$(for v in $runs; do o=${v#*:}; echo "ft-${v%%:*}:$ft${o:+;$o}"; done)
      EVALS_STEPS=${FT_STEPS:-$((STEPS * 5 / 4))}  # 1500 on a GPU
    fi
    # TRAIN_SEED=n (forty-sixth session): each run once more from other initial weights and batches (train.seed), on
    # the same set and held-out sequences, named <run>-s<n>: a recipe's seed spread
    for v in $runs; do
      name=${v%%:*}
      o=${v#*:}
      [ -n "${TRAIN_SEED:-}" ] && name=$name-s$TRAIN_SEED && o="${o:+$o;}train.seed=$TRAIN_SEED"
      # TRAIN_PRECISION=bfloat16 (fifty-third session): each run under bf16 autocast (train.precision, in COMMON),
      # named <run>-bfloat16: the recipe's 6000 steps at 1.41x float32's steps a second, for its AL against float32's
      [ -n "${TRAIN_PRECISION:-}" ] && name=$name-$TRAIN_PRECISION
      # TRAIN_RESUME=1 (forty-seventh session): continue a run a call's limit cut, from its <run>/last (saved every
      # train.save_every steps, and at the step under way if a SIGTERM reaches the trainer; the batches are a function
      # of the step, so the rest of the run sees the same ones)
      tee=(tee); [ "${TRAIN_RESUME:-0}" = 1 ] && o="${o:+$o;}resume=true" && tee=(tee -a)
      py -m specbench.train $EV strategy.soft_labels=true train.steps=${EVALS_STEPS:-$((STEPS * 5))} \
          train.time_budget_s=${TRAIN_BUDGET_S:-360} data.time_budget_s=0 output_dir=$RUN/$name ${o//;/ } \
          | "${tee[@]}" "$RUN/$name.log" | grep -v "train eagle:" | tail -8
      tar czf "$RUN/$name.tgz" -C "$RUN" $name.log $name/checkpoint $name/metrics.jsonl
      split -b 15M "$RUN/$name.tgz" "$OUT/$name.tgz.part_"
      heads=${heads:+$heads,}$RUN/$name/checkpoint
    done
    [ "${NO_SWEEP:-0}" = 1 ] && exit 0
    AL="logger=none baseline=false engine.batch_size=164 max_new_tokens=$GEN engine.dtype=float32 engine.cuda_graphs=false
        engine.warmup=false engine.device=$DEV dataset=mt-bench,humaneval $NP
        strategy.checkpoint=$heads hydra.sweep.subdir=\${hydra.job.num}"
    # strategy=eagle in both: the default strategy is eagle_tree since 2026-12-03 (fifteenth session), so without it
    # the "chain" ran the default's small tree (the nofeat run of 2026-12-04 did; experiments/drafters/README.md)
    # CHAIN_T (forty-second session): the chain's temperatures (default 0,1); NO_TREE=1 leaves the tree out (a call
    # short of device time: the chain at T = 0 is issue 13's measure)
    sweeps=("chain:strategy=eagle strategy.k=3 sampling.temperature=${CHAIN_T:-0,1}")
    [ "${NO_TREE:-0}" = 1 ] || sweeps+=("tree:strategy=eagle strategy.tree=dynamic strategy.top_k=4 strategy.num_nodes=8 strategy.k=4 sampling.temperature=0")
    for sweep in "${sweeps[@]}"; do
      left=$((DEADLINE - SECONDS))
      timeout $((left > 15 ? left : 15)) python3 -m specbench -m $AL ${sweep#*:} hydra.sweep.dir=$RUN/$stage-al/${sweep%%:*} \
          2>&1 | tr '\r' '\n' | grep -E "^results:|acceptance length|Error" || true
    done
    tar czf "$OUT/$stage-al.tgz" -C "$RUN" $stage-al
  else
    py -m specbench.train $EV train.steps=${EVALS_STEPS:-$((STEPS * 5))} train.time_budget_s=${TRAIN_BUDGET_S:-330} \
        data.time_budget_s=0 output_dir=$RUN/ev | tee "$RUN/ev.log" | grep -v "train eagle:" | tail -8
    tar czf "$RUN/ev.tgz" -C "$RUN" ev.log ev/checkpoint ev/metrics.jsonl
    split -b 15M "$RUN/ev.tgz" "$OUT/ev.tgz.part_"
    left=$((DEADLINE - SECONDS))
    timeout $((left > 15 ? left : 15)) python3 -m specbench -m logger=none baseline=false engine.batch_size=164 \
        max_new_tokens=$GEN engine.dtype=float32 engine.cuda_graphs=false engine.warmup=false engine.device=$DEV \
        dataset=mt-bench,humaneval $NP strategy=eagle strategy.k=3 sampling.temperature=0 \
        strategy.checkpoint=eagle-smollm2-135m,$RUN/ev/checkpoint hydra.sweep.dir=$RUN/ev-al \
        'hydra.sweep.subdir=${hydra.job.num}' 2>&1 | tr '\r' '\n' | grep -E "^results:|acceptance length|Error" || true
    tar czf "$OUT/ev-al.tgz" -C "$RUN" ev-al
  fi
fi

if [ "$stage" = magpie-more ]; then
  # 2026-12-05 (twenty-ninth session; README, "Ninth run"): more of the target's own requests, for a run that asks
  # whether a wider spread of prompts carries over to MT-Bench. A plain set (seed 2) and one steered by task verbs
  # (seed 3), each drawn for MAGPIE_MORE_S seconds at most; both come back in $OUT to be committed under prompts/
  # MAGPIE_SEEDS / MAGPIE_DTYPE (forty-first session): which sets ("seed:flags" each; twice-data reads seeds 4-7:
  # MAGPIE_SEEDS="4: 5:--magpie-openers 6: 7:--magpie-openers") and the writer's dtype (bfloat16: the decode engine's
  # path, as DATA_DTYPE); each set is kept in $RUN/more for the data stage of the same machine, and a set already
  # there or committed is not drawn again
  mkdir -p "$RUN/more"
  P=$PWD/experiments/drafters/prompts
  for s in ${MAGPIE_SEEDS:-"2:" "3:--magpie-openers"}; do
    name=magpie_seed${s%%:*}_smollm2-135m.jsonl.gz
    if [ ! -f "$P/$name" ] && [ ! -f "$RUN/more/$name" ]; then
      py -m specbench.train.prompts --out "$RUN/more/$name" --device $DEV --magpie $((MAGPIE * 2)) --dtype ${MAGPIE_DTYPE:-float32} \
          --code 0 --seed ${s%%:*} ${s#*:} --batch-size $MAGPIE_BS --magpie-time-budget ${MAGPIE_MORE_S:-110} | tail -3
    fi
    [ ! -f "$RUN/more/$name" ] || cp "$RUN/more/$name" "$OUT/"
  done
fi

if [ "$stage" = more ]; then
  # the distillation set exists: time_budget_s=0 generates nothing new, only the shards made by `train` are used
  py -m specbench.train strategy=medusa strategy.num_heads=5 train.batch_size=$TB train.steps=$((STEPS * 2 / 3)) train.lr=1e-3 \
      train.warmup=100 data.time_budget_s=0 train.time_budget_s=45 $COMMON output_dir=$RUN/medusa | tee "$OUT/medusa.log" | tail -4
  py -m specbench.train strategy=draft_model strategy.num_layers=4 train.batch_size=16 train.steps=$((STEPS * 2 / 3)) train.lr=2e-4 \
      train.warmup=50 data.time_budget_s=0 train.time_budget_s=60 $COMMON output_dir=$RUN/draft save_dtype=null | tee "$OUT/draft.log" | tail -4
  cp -r "$RUN/medusa/checkpoint" "$OUT/medusa"
  cp "$RUN/medusa/metrics.jsonl" "$OUT/medusa_metrics.jsonl"; cp "$RUN/draft/metrics.jsonl" "$OUT/draft_metrics.jsonl"
  # the table: every strategy x k x T on all of MT-Bench (turn 1) and HumanEval, fp32, all prompts in one batch;
  # no in-job baseline: the `none` jobs are the reference for exact match (specbench.report)
  T=$RUN/table
  E="-m $NP dataset=mt-bench,humaneval max_new_tokens=$GEN engine.batch_size=$EB engine.dtype=float32
     engine.cuda_graphs=false engine.warmup=false baseline=false logger=none engine.device=$DEV"
  G5="strategy.k=$KS sampling.temperature=0,1"
  ev() {  # one sweep, cut at the deadline (its finished jobs stay: results.json is written last)
    local name=$1 left=$((DEADLINE - SECONDS)); shift
    if [ $left -lt 15 ]; then echo "skipped $name: deadline"; return; fi
    timeout $left python3 -m specbench $E hydra.sweep.dir=$T/$name 'hydra.sweep.subdir=${hydra.job.num}' "$@" 2>&1 \
      | tr '\r' '\n' | grep -E "^results:|Error|error" | tail -3 || true
    echo "$name: $(ls $T/$name/*/results.json 2>/dev/null | wc -l) jobs done, $((DEADLINE - SECONDS))s left"
  }
  ev none strategy=none sampling.temperature=0,1
  ev draft_model strategy=draft_model draft.path=$RUN/draft/checkpoint $G5
  ev eagle strategy=eagle strategy.checkpoint=$RUN/eagle/checkpoint $G5
  ev medusa strategy=medusa strategy.checkpoint=$RUN/medusa/checkpoint $G5
  ev ngram strategy=ngram $G5
  ev layer_skip_4 strategy=layer_skip strategy.num_layers=4 $G5
  ev layer_skip_15 strategy=layer_skip strategy.num_layers=15 $G5
  tar czf "$OUT/table.tgz" -C "$RUN" table
fi
ls -la "$OUT"
