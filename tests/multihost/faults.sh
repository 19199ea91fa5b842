#!/usr/bin/env bash
# Faults across hosts, on a bed of 2 namespace hosts (scripts/hosts.sh),
# training GPT with comm.timeout_s=3 and a checkpoint every 20 steps:
#   lost   every process of host ndtt-h1 (ranks and launcher daemon)
#          SIGKILLed at once, mid-training;
#   cut    ndtt-h1's link cut mid-step (ip link set ndtt-h1v down).
# Each in two layouts: dp=4 (2 ranks per host; the dp group spans both)
# and dp=2 x pp=2 with the pipeline's stages on different hosts. Every
# time the whole job (mpirun) must end within comm.timeout_s + 10 s of the
# fault with a non-zero exit code, every rank on every host must be gone by
# then, and every other process on every node (launcher daemons, also the
# cut-off host's) within 30 s; the output must name the operation (and,
# where the watchdog ends the job, the group and the hosts), and every
# checkpoint the job left must be intact.
# Usage: faults.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
source "$src/tests/multihost/bed.sh"
bed_up "$src" 2
timeout_s=3
bound=$((timeout_s + 10))  # the job and every rank
# A cut-off host's launcher daemon ends by itself once TCP gives up on the
# head node (keepalives, retransmissions): it must not stay, but it is not
# held to the job's bound.
daemons_bound=30
results=()

fail() {
  echo "FAIL: $*"
  exit 1
}

# ndtrain processes on any host of the bed.
ranks_left() {
  local ns p
  for ns in ndtt-h0 ndtt-h1; do
    for p in $(ip netns pids "$ns"); do
      [[ $(cat "/proc/$p/comm" 2>/dev/null) == ndtrain ]] && echo "$ns:$p"
    done
  done
}

# Every process on the bed's nodes (mpirun, daemons, ranks): "NODE:PID".
procs_left() {
  local ns p
  for ns in ndtt-head ndtt-h0 ndtt-h1; do
    for p in $(ip netns pids "$ns"); do echo "$ns:$p"; done
  done
}

# Between cases: the link back up (and nothing left, should a check have
# failed).
reset_bed() {
  local ns
  for ns in ndtt-head ndtt-h0 ndtt-h1; do
    pids=$(ip netns pids "$ns")
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
  done
  ip link set ndtt-h1v up
}

run_case() {  # run_case lost|cut dp|pp EXPECTED_REGEX
  local fault=$1 layout=$2 expect=$3 name=$1_$2
  local dir=$work/$name log=$work/$name.log margs=() args=(parallel.dp=4)
  if [[ $layout == pp ]]; then
    # Ranks alternate between hosts; rank = 2 d + s: stage s on ndtt-h<s>.
    margs=(--map-by node)
    args=(parallel.dp=2 parallel.pp=2 parallel.microbatches=2)
  fi
  "${bed_mpirun[@]}" "${margs[@]}" -np 4 "$bin" train \
    -c "$src/configs/verify/gpt.yaml" "${args[@]}" train.threads=1 \
    train.steps=1000000 train.log_every=100 train.checkpoint_every=20 \
    comm.timeout_s=$timeout_s run.dir="$dir" > "$log" 2>&1 &
  local job=$!
  for _ in $(seq 1 3000); do
    [[ -f $dir/checkpoints/step-20/manifest.json ]] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.01
  done
  [[ -f $dir/checkpoints/step-20/manifest.json ]] ||
    { cat "$log"; fail "$name: no checkpoint step-20 while the run lived"; }
  sleep 0.5
  local t0 gone="" rc
  t0=$(now)
  if [[ $fault == lost ]]; then
    kill -9 $(ip netns pids ndtt-h1)
  else
    ip link set ndtt-h1v down
  fi
  local took="" all=""
  while [[ -z $took || -z $gone || -z $all ]]; do
    [[ -z $took ]] && ! kill -0 $job 2>/dev/null && took=$(elapsed "$t0")
    [[ -z $gone && -z $(ranks_left) ]] && gone=$(elapsed "$t0")
    [[ -z $all && -z $(procs_left) ]] && all=$(elapsed "$t0")
    local at
    at=$(elapsed "$t0" | cut -d. -f1)
    if ((at >= daemons_bound)) || { ((at >= bound)) && [[ -z $took || -z $gone ]]; }; then
      echo "FAIL ($name): $(elapsed "$t0") s after the fault: job" \
        "$([[ -n $took ]] && echo "ended after $took s" || echo still running)," \
        "ranks left:" \
        "$(ranks_left | tr '\n' ' '), processes left: $(procs_left | tr '\n' ' ')"
      cat "$log"; kill -9 $job; return 1
    fi
    sleep 0.1
  done
  wait $job
  rc=$?
  local line="$name: job ended ${took} s after the fault (bound $bound s), last rank gone after $gone s, last process on any node (daemons included) after $all s (bound $daemons_bound s), exit code $rc"
  echo "$line"
  results+=("$line")
  ((rc != 0)) || { cat "$log"; echo "FAIL ($name): exit code 0"; return 1; }
  grep -Eq "$expect" "$log" ||
    { cat "$log"; echo "FAIL ($name): no line matching: $expect"; return 1; }
  grep -E "$expect" "$log" | head -2
  check_checkpoints "$dir/checkpoints" | tail -1 ||
    { echo "FAIL ($name): a checkpoint is damaged"; return 1; }
  reset_bed
}

# A lost host: mpirun sees its daemon vanish, names it and ends the job;
# the survivors report what they were doing when the launcher ended them.
lost_dp="terminated by the launcher \\(another rank ended\\) during: step [0-9]+, instruction [0-9]+ '[^']+' \\([a-z_]+\\)|all_reduce on group dp timed out"
lost_pp="terminated by the launcher \\(another rank ended\\) during: (pipeline stage 0 of 2, )?(step [0-9]+, )?instruction [0-9]+ '[^']+' \\([a-z_]+\\)|on group pp timed out"
# A cut link: the watchdog names the operation, the group and the hosts.
# With dp=4 the dp group and the world group are the same four ranks: the
# cut may find the ranks in the gradient all-reduce or, around a checkpoint,
# in the world barrier that ends the save.
cut_dp="rank [0-9]: (all_reduce on group dp timed out after $timeout_s s \\(this rank is on host ndtt-h[01]; group dp|barrier on group world timed out after $timeout_s s \\(this rank is on host ndtt-h[01]; group world) has world ranks 0, 1 on ndtt-h0 and 2, 3 on ndtt-h1\\)"
# In the pipeline case a rank whose data-parallel partner shares its host
# may time out first, on that partner (stuck behind the cut link).
cut_pp="rank [0-9]: all_reduce on group dp timed out after $timeout_s s \\(this rank is on host ndtt-(h[01]); group dp has world ranks [0-9], [0-9] on ndtt-\\1\\)|rank [0-9]: [a-z_]+ (from|to) peer [01] \\(tag [0-9]+\\) on group pp timed out after $timeout_s s \\(this rank is on host ndtt-h[01]; peer [01] is world rank [0-9] on host ndtt-h[01]\\)|rank [0-9]: [a-z_]+ on group pp timed out after $timeout_s s \\(this rank is on host ndtt-h[01]; group pp has world ranks [0-9] on ndtt-h[01] and [0-9] on ndtt-h[01]\\)|rank [0-9]: barrier on group world timed out after $timeout_s s \\(this rank is on host ndtt-h[01]; group world has world ranks 0, 2 on ndtt-h0 and 1, 3 on ndtt-h1\\)"

# mpirun names the lost host: its daemon, or, when the daemon reported its
# ranks' deaths before it died itself, the ranks.
lost_named="Remote daemon: .* on node ndtt-h1|on node ndtt-h1 exited on signal 9"
named() {  # named CASE: mpirun's output names ndtt-h1
  grep -Eq "$lost_named" "$work/$1.log" &&
    grep -Em1 "$lost_named" "$work/$1.log" ||
    { cat "$work/$1.log"; echo "FAIL ($1): mpirun does not name ndtt-h1"; false; }
}
run_case lost dp "$lost_dp" && named lost_dp &&
  run_case lost pp "$lost_pp" && named lost_pp &&
  run_case cut dp "$cut_dp" &&
  run_case cut pp "$cut_pp" || fail "see above"
printf '%s\n' "${results[@]}"
echo PASS
