#!/usr/bin/env bash
# Multi-host runs on a bed of 2 namespace hosts (scripts/hosts.sh), ranks
# on different hosts talking TCP:
#   1. mpirun places 2 ranks on each host, each in its host's namespace and
#      under its host name;
#   2. test_mpi (every collective, send/recv, the watchdog, host names in
#      its messages) at 4 ranks across the hosts;
#   3. `ndtrain verify` passes for the MLP at dp=4 (2 ranks per host) and
#      for GPT at dp=2 x pp=2 with the pipeline's two stages on different
#      hosts (--map-by node), and for the GPT at dp=4 under ZeRO stage 1
#      (gradients reduced to and parameters broadcast from owners on both
#      hosts), stage 2 (reduced every micro-batch, slots shared) and stage
#      3 (parameters gathered from owners on both hosts), and bytes cross
#      the hosts' links;
#   4. `ndtrain train --auto-layout` names the job's hosts as mpirun
#      placed them (by slot: 2 hosts of 2 ranks; by node: alternating) and
#      trains in its pick;
#   5. without link options --auto-layout measures the links: between the
#      hosts 0.05-0.16 GB/s when their link is shaped to 1 Gbit/s, over 4
#      times that unshaped.
# The bed is removed on exit.
# Usage: verify_hosts.sh NDTRAIN_BINARY SOURCE_DIR TEST_MPI_BINARY
set -u
bin=$1
src=$2
test_mpi=$3
source "$src/tests/multihost/bed.sh"
bed_up "$src" 2

fail() {
  echo "FAIL: $*"
  exit 1
}

rx_bytes() {  # rx_bytes HOST: bytes received on the host's link
  ip netns exec "$1" cat /sys/class/net/eth0/statistics/rx_bytes
}

# 1. Placement: rank -> host name -> namespace address.
where='echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)'
where+=' $(ip -4 -o addr show dev eth0 | awk "{print \$4}")"'
placement() {  # placement NAME MPIRUN_ARGS...: the "rank R on HOST ADDR" lines
  local name=$1 rc
  shift
  timeout 60 "${bed_mpirun[@]}" "$@" -np 4 sh -c "$where" \
    > "$work/$name.out" 2> "$work/$name.err"
  rc=$?
  grep "^rank " "$work/$name.out" | sort > "$work/$name"
  echo "$name (exit code $rc): $(tr '\n' ';' < "$work/$name")"
  [[ -s $work/$name.err ]] && { echo "$name, stderr:"; cat "$work/$name.err"; }
  return $rc
}
placement by_slot || fail "mpirun on the bed"
printf 'rank %s on ndtt-h%s 198.19.77.%s/24\n' 0 0 1 1 0 1 2 1 2 3 1 2 |
  cmp -s - "$work/by_slot" ||
  { cat "$work/by_slot.out"; fail "ranks not placed 2 per host in their namespaces"; }
placement by_node --map-by node || fail "mpirun on the bed"
printf 'rank %s on ndtt-h%s 198.19.77.%s/24\n' 0 0 1 1 1 2 2 0 1 3 1 2 |
  cmp -s - "$work/by_node" ||
  { cat "$work/by_node.out"; fail "--map-by node does not alternate hosts"; }

# 2. The MPI suite across hosts.
timeout 300 "${bed_mpirun[@]}" -np 4 "$test_mpi" > "$work/test_mpi.log" 2>&1
rc=$?
grep -E "host names:|PASSED|FAILED" "$work/test_mpi.log"
((rc == 0)) || { cat "$work/test_mpi.log"; fail "test_mpi at 4 ranks on 2 hosts: exit code $rc"; }
grep -q "this rank is on host ndtt-h0; peer 3 is world rank 3 on host ndtt-h1" \
  "$work/test_mpi.log" || fail "watchdog message does not name both hosts"

# 3. verify across hosts.
run_verify() {  # run_verify NAME MPIRUN_ARGS... -- NDTRAIN_ARGS...
  local name=$1 margs=() rx0 rx1 rc t0
  shift
  while [[ $1 != -- ]]; do margs+=("$1"); shift; done
  shift
  rx0=$(rx_bytes ndtt-h1)
  t0=$(now)
  timeout 300 "${bed_mpirun[@]}" "${margs[@]}" "$bin" verify "$@" \
    > "$work/$name.log" 2>&1
  rc=$?
  rx1=$(rx_bytes ndtt-h1)
  tail -3 "$work/$name.log"
  echo "$name: exit code $rc in $(elapsed "$t0") s, $((rx1 - rx0)) bytes into ndtt-h1"
  ((rc == 0)) && grep -q "^verify: PASS$" "$work/$name.log" ||
    { cat "$work/$name.log"; fail "$name"; }
  ((rx1 - rx0 > 100000)) || fail "$name: under 100 kB crossed to ndtt-h1"
}
run_verify mlp_dp4 -np 4 -- -c "$src/configs/verify/mlp.yaml" parallel.dp=4
# parallel.order dp,pp: rank = 2 d + s, so with ranks alternating between
# hosts stage 0 runs on ndtt-h0 and stage 1 on ndtt-h1.
run_verify gpt_dp2_pp2 --map-by node -np 4 -- -c "$src/configs/verify/gpt.yaml" \
  model.depth=4 train.batch_size=24 parallel.dp=2 parallel.pp=2 \
  parallel.microbatches=3
run_verify gpt_zero_dp4 -np 4 -- -c "$src/configs/verify/gpt.yaml" \
  parallel.dp=4 parallel.zero=1 parallel.bucket_mb=0.01
run_verify gpt_zero2_dp4 -np 4 -- -c "$src/configs/verify/gpt.yaml" \
  parallel.dp=4 parallel.zero=2 parallel.bucket_mb=0.01 model.depth=6 \
  parallel.microbatches=2
run_verify gpt_zero3_dp4 -np 4 -- -c "$src/configs/verify/gpt.yaml" \
  parallel.dp=4 parallel.zero=3 parallel.bucket_mb=0.01 model.depth=6 \
  parallel.microbatches=2

# 4. --auto-layout sees the job's hosts: by slot two blocks of 2 ranks, by
# node alternating; the job trains in the plan's pick.
auto=(-c "$src/configs/verify/gpt.yaml" train.steps=3 train.eval_every=0
  train.checkpoint_every=0 train.eval_samples=16 --auto-layout --gflops 100
  --update-ns-per-param 1)
links=(--link-alpha-us 2 --link-gbps 7.5 --host-link-alpha-us 30
  --host-link-gbps 1.25)
auto_hosts() {  # auto_hosts NAME HOSTS LINK_TEXT MPIRUN_ARGS... [-- NDTRAIN_ARGS...]
  local name=$1 hosts=$2 link=$3 rc
  shift 3
  local mpi_args=() nd_args=()
  while (($#)) && [[ $1 != -- ]]; do mpi_args+=("$1"); shift; done
  (($#)) && shift
  nd_args=("$@")
  timeout 300 "${bed_mpirun[@]}" "${mpi_args[@]}" -np 4 "$bin" train \
    "${auto[@]}" "${nd_args[@]}" run.dir="$work/$name" > "$work/$name.log" 2>&1
  rc=$?
  ((rc == 0)) || { cat "$work/$name.log"; fail "$name: exit code $rc"; }
  grep -qE ", $hosts linked at $link\); overrides " \
    "$work/$name.log" || { cat "$work/$name.log"; fail "$name: not $hosts linked at $link"; }
  grep -q "^step 3/3 " "$work/$name.log" || { cat "$work/$name.log"; fail "$name: no step 3"; }
  grep "^ndtrain: layout from the plan" "$work/$name.log"
}
given="alpha 30\.00 us, 1\.250 GB/s"
measured="alpha [0-9.]+ us, [0-9.]+ GB/s \(measured\)"
auto_hosts auto_by_slot "2 hosts of 2 ranks" "$given" -- "${links[@]}"
auto_hosts auto_by_node "2 hosts \(ranks 0 2 \| 1 3\)" "$given" --map-by node \
  -- "${links[@]}"
# 5. Without link options the links are measured on the job's ranks: the
# hosts' link at the veth pair's speed, then shaped to 1 Gbit/s (tc tbf),
# where a 4 MiB all-reduce of 2 ranks moves 4 MiB each way: 0.125 GB/s.
host_gbps() {  # host_gbps NAME: the measured bandwidth between the hosts
  sed -n 's/.* linked at alpha [0-9.]* us, \([0-9.]*\) GB\/s (measured)); .*/\1/p' \
    "$work/$1.log"
}
auto_hosts auto_measured "2 hosts of 2 ranks" "$measured"
grep -qE "link alpha [0-9.]+ us, [0-9.]+ GB/s \(measured\), 2 hosts" \
  "$work/auto_measured.log" || { cat "$work/auto_measured.log"; fail "auto_measured: link in the host not measured"; }
"$src/scripts/hosts.sh" link 1gbit > /dev/null || fail "hosts.sh link 1gbit"
auto_hosts auto_measured_1gbit "2 hosts of 2 ranks" "$measured"
"$src/scripts/hosts.sh" link off > /dev/null || fail "hosts.sh link off"
fast=$(host_gbps auto_measured)
shaped=$(host_gbps auto_measured_1gbit)
echo "measured between hosts: $fast GB/s; shaped to 1 Gbit/s: $shaped GB/s"
awk -v f="$fast" -v s="$shaped" 'BEGIN { exit !(s >= 0.05 && s <= 0.16 && f > 4 * s) }' \
  || fail "host link measured at $shaped GB/s when shaped to 1 Gbit/s (0.05-0.16 wanted), $fast GB/s unshaped (over 4x that wanted)"
echo PASS
