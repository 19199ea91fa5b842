#!/usr/bin/env bash
# No rank holds more of the model than its layout gives it, from start-up
# through checkpoints: under a memory cap (train.mem_cap_mb=100) that the
# model's parameters and gradients alone exceed, a 4-rank layout trains,
# saves its checkpoint and resumes from it, while the same model without
# the layout stops with the cap's error, and evaluation stays within what
# training needs. Pipeline ranks build only their
# modules; data parallelism lays out its buckets before the model is built
# and takes over each module as it is built (ZeRO stage 3 keeps a quarter
# of the values); checkpoints are written and read one tensor at a time.
# Layouts:
#   pp4: GPT width 384, 8 blocks (14.3M parameters, values and gradients
#        109 MiB), a 4-stage pipeline (about 60 MiB per rank);
#   zero3: the same GPT, dp=4 with ZeRO stage 3 and 1 MiB buckets: the
#        other ranks' values and gradients in slots a layer apart (18.4
#        MiB each of parameter and gradient memory per rank, peak 74 MiB);
#        a module apart (29.7 MiB each, about three blocks' worth) the run
#        passed the cap at its first step;
#   eval: GPT width 128, 1 block, 1024 tokens, dp=4 with one sample per
#        rank and step: evaluation runs in batches of that micro-batch
#        (in batches of train.batch_size, 4 samples, its attention scores
#        alone took 64 MiB, and the run stopped at its evaluation).
# Usage: memory_under_cap.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cap=100
common=(-c "$src/configs/fortunes_gpt.yaml" data.name=synthetic
  model.seq_len=32 train.threads=1 train.log_every=1 train.eval_every=0
  train.checkpoint_every=0 train.eval_samples=64 optim.warmup_steps=0
  train.mem_cap_mb=$cap)

# check LAYOUT MODEL_ARGS -- LAYOUT_ARGS
check() {
  local name=$1
  shift
  local model=()
  while [[ $1 != -- ]]; do model+=("$1"); shift; done
  shift
  local cfg=("${common[@]}" "${model[@]}")
  "$bin" train "${cfg[@]}" train.steps=1 run.dir="$work/$name.serial" \
    >"$work/$name.serial.log" 2>&1
  local rc=$?
  if ((rc == 0)) || ! grep -q "memory cap exceeded" "$work/$name.serial.log"
  then
    cat "$work/$name.serial.log"
    echo "FAIL: $name: without the layout the model should not fit $cap MiB (exit $rc)"
    exit 1
  fi
  echo "$name serial: $(grep -m1 -o 'memory cap exceeded.*live' "$work/$name.serial.log")"
  local steps resume=()
  for steps in 3 4; do
    mpirun --oversubscribe --bind-to none -np 4 "$bin" train "${cfg[@]}" \
      "$@" run.dir="$work/$name" train.steps=$steps "${resume[@]}" \
      >"$work/$name.$steps.log" 2>&1
    rc=$?
    cat "$work/$name.$steps.log"
    if ((rc != 0)); then
      echo "FAIL: $name under $cap MiB to step $steps (exit $rc)"
      exit 1
    fi
    grep -q "^step $steps/$steps" "$work/$name.$steps.log" ||
      { echo "FAIL: $name: no step $steps/$steps"; exit 1; }
    resume=(train.resume=latest)
  done
}

check pp4 model.dim=384 model.depth=8 model.heads=6 model.mlp_dim=1536 \
  train.batch_size=4 -- parallel.pp=4 parallel.microbatches=4
check zero3 model.dim=384 model.depth=8 model.heads=6 model.mlp_dim=1536 \
  train.batch_size=4 -- parallel.dp=4 parallel.zero=3 parallel.bucket_mb=1
check eval model.dim=128 model.depth=1 model.heads=4 model.mlp_dim=512 \
  model.seq_len=1024 train.batch_size=4 -- parallel.dp=4
echo PASS
