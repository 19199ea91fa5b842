#!/usr/bin/env bash
# Watchdog end to end: in a 2-rank data-parallel run, rank 1 is frozen
# (SIGSTOP) mid-training. Rank 0 must report the timed-out collective,
# naming the rank, the operation and the group, and the whole job must exit
# non-zero within the watchdog bound (comm.timeout_s=3) plus 15 s.
# Then the same with rank 1 killed (SIGKILL): the job must end non-zero.
# Usage: stuck_rank.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rank1_pid() {  # the ndtrain process with the larger pid is not rank 0 reliably: ask each
  for p in $(pgrep -f "$work/run"); do
    if [[ $(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') == 1 ]]; then
      echo "$p"
    fi
  done
}

run_case() {  # run_case SIGNAL
  local sig=$1 log=$work/$1.log
  mpirun --oversubscribe -np 2 "$bin" train -c "$src/configs/verify/gpt.yaml" \
    parallel.dp=2 train.threads=1 train.steps=1000000 train.log_every=100000 \
    comm.timeout_s=3 run.dir="$work/run" > "$log" 2>&1 &
  local job=$!
  local pid=""
  for _ in $(seq 1 100); do
    pid=$(rank1_pid)
    [[ -n $pid ]] && grep -q "data parallel" "$log" && break
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
      echo "FAIL ($sig): job still running ${waited}s after the signal"
      pkill -9 -f "$work/run"; kill -9 $job; return 1
    fi
  done
  wait $job
  local rc=$?
  echo "$sig: job ended ${waited}s after the signal, exit code $rc"
  if ((rc == 0)); then echo "FAIL ($sig): exit code 0"; cat "$log"; return 1; fi
  if [[ $sig == STOP ]] && ! grep -q "rank 0: all_reduce on group dp timed out after 3 s" "$log"; then
    echo "FAIL: no watchdog message"; cat "$log"; return 1
  fi
  pkill -9 -f "$work/run" 2>/dev/null
  return 0
}

run_case STOP && run_case KILL && echo "PASS"
