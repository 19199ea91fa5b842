#!/usr/bin/env bash
# A pipeline rank never holds more of the model than its own stages: under
# a memory cap (train.mem_cap_mb) that the whole model's parameters and
# gradients alone exceed, the same model trains as a 4-stage pipeline,
# saves its checkpoint and resumes from it, while the run without a
# pipeline stops with the cap's error. Each rank builds only its modules;
# the checkpoint is written and read one tensor at a time.
# GPT, width 384, 8 blocks: 14.3M parameters, 109 MiB of values and
# gradients (the checkpoint's model and AdamW state: 164 MiB); a stage of
# two blocks takes about 60 MiB with its AdamW state.
# Usage: pipeline_memory.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cap=100
cfg=(-c "$src/configs/fortunes_gpt.yaml" data.name=synthetic model.dim=384
  model.depth=8 model.heads=6 model.mlp_dim=1536 model.seq_len=32
  train.batch_size=4 train.steps=3 train.threads=1 train.log_every=1
  train.eval_every=0 train.checkpoint_every=0 train.eval_samples=64
  optim.warmup_steps=0 train.mem_cap_mb=$cap)

"$bin" train "${cfg[@]}" run.dir="$work/serial" >"$work/serial.log" 2>&1
rc=$?
if ((rc == 0)) || ! grep -q "memory cap exceeded" "$work/serial.log"; then
  cat "$work/serial.log"
  echo "FAIL: without a pipeline the model should not fit $cap MiB (exit $rc)"
  exit 1
fi
grep -m1 "memory cap exceeded" "$work/serial.log"

# pp_run NAME STEPS [ARGS...]: the 4-stage run; fails the test unless it
# trains to STEPS.
pp_run() {
  local name=$1 steps=$2
  shift 2
  mpirun --oversubscribe --bind-to none -np 4 "$bin" train "${cfg[@]}" \
    parallel.pp=4 parallel.microbatches=4 run.dir="$work/pp" \
    train.steps="$steps" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  cat "$work/$name.log"
  if ((rc != 0)); then
    echo "FAIL: $name of the pipeline under $cap MiB failed (exit $rc)"
    exit 1
  fi
  grep -q "^step $steps/$steps" "$work/$name.log" ||
    { echo "FAIL: $name: no step $steps/$steps"; exit 1; }
}

pp_run training 3
pp_run resuming 4 train.resume=latest
echo PASS
