#!/usr/bin/env bash
# A run killed (SIGKILL) mid-training and resumed from its latest checkpoint
# in a new process continues bit for bit: every logged loss, learning rate,
# gradient norm and evaluation of the resumed run equals the uninterrupted
# run's exactly (JSON numbers print the shortest text that round-trips the
# double), and the final weights are byte-identical. Serially, at dp=2
# under mpirun, and at dp=2 with ZeRO stage 1 (parallel.zero=1, whose
# optimizer state is gathered from the ranks that own it and scattered back
# to them), stage 2 (parallel.zero=2, two micro-batches) and stage 3
# (parallel.zero=3: the parameters too are gathered from their owners and
# loaded into the owners' buckets).
# Usage: resume_bitwise.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'pkill -9 -f "run.dir=$work" 2>/dev/null; rm -rf "$work"' EXIT
steps=60
cfg=(-c "$src/configs/verify/vit.yaml" train.steps=$steps train.log_every=1
     train.checkpoint_every=5 train.eval_every=20 train.eval_samples=64
     train.threads=1)

launch() {  # launch NP DIR ARGS... (in the background)
  local np=$1 dir=$2; shift 2
  if ((np == 1)); then
    "$bin" train "${cfg[@]}" run.dir="$dir" "$@" >> "$dir.log" 2>&1 &
  else
    mpirun --oversubscribe --bind-to none -np "$np" "$bin" train "${cfg[@]}" \
      parallel.dp="$np" run.dir="$dir" "$@" >> "$dir.log" 2>&1 &
  fi
}

# The deterministic fields of every step's last metrics line.
fields() {
  python3 -c '
import json, sys
last = {}
for line in open(sys.argv[1] + "/metrics.jsonl"):
    j = json.loads(line)
    kind = "eval" if "eval_loss" in j else "train"
    keep = ("loss", "lr", "grad_norm", "eval_loss", "eval_accuracy")
    last[(j["step"], kind)] = json.dumps({k: j[k] for k in keep if k in j})
for (step, kind), v in sorted(last.items()):
    print(step, kind, v)' "$1"
}

case_np() {  # case_np NP NAME [ARGS...]
  local np=$1 name=$2
  shift 2
  local full=$work/full$name cut=$work/cut$name
  launch "$np" "$full" "$@"
  wait $! || { echo "FAIL ($name): uninterrupted run"; cat "$full.log"; return 1; }
  launch "$np" "$cut" "$@"
  local job=$! waited=0
  # Kill every rank once the first checkpoint is complete.
  until [[ -f $cut/checkpoints/step-5/manifest.json ]]; do
    sleep 0.01
    waited=$((waited + 1))
    if ((waited > 6000)) || ! kill -0 $job 2>/dev/null; then
      echo "FAIL ($name): no checkpoint step-5 appeared while the run lived"
      cat "$cut.log"; return 1
    fi
  done
  pkill -9 -f "run.dir=$cut( |$)"
  wait $job 2>/dev/null
  if [[ -d $cut/checkpoints/step-$steps ]]; then
    echo "FAIL ($name): the run finished before it was killed"; return 1
  fi
  local at
  at=$(ls "$cut/checkpoints" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
  launch "$np" "$cut" "$@" train.resume=latest
  wait $! || { echo "FAIL ($name): resumed run"; cat "$cut.log"; return 1; }
  grep -q "resumed from .* at step $at" "$cut.log" || {
    echo "FAIL ($name): no 'resumed from ... at step $at' in the log"
    cat "$cut.log"; return 1; }
  if ! diff <(fields "$full") <(fields "$cut") > "$work/diff"; then
    echo "FAIL ($name): metrics differ after resuming at step $at:"
    head -20 "$work/diff"; return 1
  fi
  if ! cmp "$full/checkpoints/step-$steps/model.safetensors" \
           "$cut/checkpoints/step-$steps/model.safetensors"; then
    echo "FAIL ($name): final weights differ"; return 1
  fi
  echo "$name: killed after step-$at was written, resumed in a new" \
       "process: $(fields "$full" | wc -l) metrics lines and the final" \
       "weights identical"
}

case_np 1 np1 && case_np 2 np2 &&
  case_np 2 np2_zero parallel.zero=1 parallel.bucket_mb=0.01 &&
  case_np 2 np2_zero2 parallel.zero=2 parallel.bucket_mb=0.01 \
    parallel.microbatches=2 &&
  case_np 2 np2_zero3 parallel.zero=3 parallel.bucket_mb=0.01 \
    parallel.microbatches=2 && echo PASS
