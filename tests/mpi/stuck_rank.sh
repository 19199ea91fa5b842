#!/usr/bin/env bash
# Watchdog end to end: in a 2-rank run, rank 1 is frozen (SIGSTOP)
# mid-training. Rank 0 must report the timed-out operation, naming the
# rank, the operation and the group (and, in a pipeline, the stage and the
# instruction), and the whole job must exit non-zero within the watchdog
# bound (comm.timeout_s=3) plus 15 s. Then the same with rank 1 killed
# (SIGKILL): the job must end non-zero: mpirun ends it, naming the dead
# rank, and the survivor reports what it was doing (the pipeline stage and
# instruction) when the launcher's SIGTERM arrives.
# Layouts: data parallel (dp=2), a 2-stage 1F1B pipeline (pp=2), ZeRO
# stage 1 at dp=2, stage 2 (two micro-batches, six blocks: rank 0 also
# waits for a reduce inside backward, before reusing a gradient slot) and
# stage 3 (the same, also waiting for parameter broadcasts before a
# module's forward and backward).
# Usage: stuck_rank.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT

rank1_pid() {  # the ndtrain process with the larger pid is not rank 0 reliably: ask each
  for p in $(pgrep -f "$work/run"); do
    if [[ $(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') == 1 ]]; then
      echo "$p"
    fi
  done
}

run_case() {  # run_case SIGNAL LAYOUT EXPECTED_MESSAGE_REGEX [MPIRUN_FLAG]
  local sig=$1 layout=$2 expect=$3 flag=${4:-} log=$work/$1.$2${4:-}.log
  local args=(parallel.dp=2)
  [[ $layout == pp ]] && args=(parallel.pp=2 parallel.microbatches=4)
  [[ $layout == zero ]] &&
    args=(parallel.dp=2 parallel.zero=1 parallel.bucket_mb=0.01)
  [[ $layout == zero2 ]] &&
    args=(parallel.dp=2 parallel.zero=2 parallel.bucket_mb=0.01
      parallel.microbatches=2 model.depth=6)
  [[ $layout == zero3 ]] &&
    args=(parallel.dp=2 parallel.zero=3 parallel.bucket_mb=0.01
      parallel.microbatches=2 model.depth=6)
  mpirun --oversubscribe $flag -np 2 "$bin" train -c "$src/configs/verify/gpt.yaml" \
    "${args[@]}" train.threads=1 train.steps=1000000 train.log_every=100000 \
    comm.timeout_s=3 run.dir="$work/run" > "$log" 2>&1 &
  local job=$!
  local pid=""
  for _ in $(seq 1 100); do
    pid=$(rank1_pid)
    [[ -n $pid ]] && grep -q "ndtrain: model" "$log" && break
    sleep 0.1
  done
  if [[ -z $pid ]]; then echo "FAIL: rank 1 not found"; kill -9 $job; return 1; fi
  sleep 1
  local t0=$SECONDS
  kill -"$sig" "$pid"
  local waited=0
  while kill -0 $job 2>/dev/null; do
    sleep 0.2
    waited=$((SECONDS - t0))
    if ((waited > 18)); then
      echo "FAIL ($sig $layout): job still running ${waited}s after the signal"
      pkill -9 -f "$work/run"; kill -9 $job; return 1
    fi
  done
  wait $job
  local rc=$?
  echo "$sig $layout: job ended ${waited}s after the signal, exit code $rc"
  if ((rc == 0)); then echo "FAIL ($sig $layout): exit code 0"; cat "$log"; return 1; fi
  if [[ -n $expect ]]; then
    if ! grep -Eq "$expect" "$log"; then
      echo "FAIL ($layout): no watchdog message matching: $expect"; cat "$log"; return 1
    fi
    grep -E "$expect" "$log" | head -1
  fi
  pkill -9 -f "$work/run" 2>/dev/null
  return 0
}

dp_msg="rank 0: all_reduce on group dp timed out after 3 s"
# Rank 0 (stage 0) waits on stage 1 in a receive, send or the clipping
# all-reduce of kOptimizerStep, whichever instruction it is at, or in the
# loss reduction after the schedule.
pp_msg="(pipeline stage 0 of 2, instruction [0-9]+ '[^']+' \\([a-z_]+\\)|step [0-9]+, loss reduction after the step's schedule): rank 0: .* on group pp timed out after 3 s"
dp_dead="\\[rank 0\\] terminated by the launcher \\(another rank ended\\) during: step [0-9]+"
pp_dead="\\[rank 0\\] terminated by the launcher \\(another rank ended\\) during: pipeline stage 0 of 2, instruction [0-9]+ '[^']+' \\([a-z_]+\\)"
# ZeRO stage 1: rank 0 waits in a bucket's reduce to its owner, the
# owners' broadcast, or an all-reduce (gradient norm, loss).
zero_msg="rank 0: (reduce|broadcast|all_reduce) on group dp timed out after 3 s"
run_case STOP dp "$dp_msg" && run_case KILL dp "$dp_dead" &&
  run_case STOP pp "$pp_msg" && run_case KILL pp "$pp_dead" &&
  run_case STOP zero "$zero_msg" && run_case KILL zero "$dp_dead" &&
  run_case STOP zero2 "$zero_msg" && run_case KILL zero2 "$dp_dead" &&
  run_case STOP zero3 "$zero_msg" && run_case KILL zero3 "$dp_dead" &&
  echo "PASS"
