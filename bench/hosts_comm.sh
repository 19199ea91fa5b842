#!/usr/bin/env bash
# All-reduce across hosts: ndt's ProcessGroup::all_reduce against raw
# MPI_Allreduce (bench/comm_bench.cpp) on each kind of link, and the
# alpha-beta link model (src/plan/link_cost.h) fitted to both:
#   shm      2 ranks on this machine (shared memory), for reference
#   veth     2 hosts of the bed (scripts/hosts.sh), 1 rank each, TCP over
#            the bridge, no shaping
#   10gbit   the same through a token bucket of 10 Gbit/s on every link
#   1gbit    the same at 1 Gbit/s
# Each link runs NDT_HOSTS_COMM_ROUNDS rounds (default 3) of comm_bench
# (4 KiB .. 16 MiB, --reps NDT_HOSTS_COMM_REPS, default 30). Prints every
# round's table and fits, then a summary per link (median over rounds of
# the round's smallest ratio over sizes >= 1 MiB; the fits of the median
# round), and last min_ratio_vs_mpi=X: the smallest of those medians over
# the TCP links (ratio = mpi_time / ndt_time; >= 0.95 is within 5%).
# The bed's hosts share this machine's cores, so mpirun binds nothing.
# Needs root (network namespaces); the bed is removed on exit, also on
# failure.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${NDT_BUILD_DIR:-build}
ROUNDS=${NDT_HOSTS_COMM_ROUNDS:-3}
REPS=${NDT_HOSTS_COMM_REPS:-30}
BIN=$BUILD/comm_bench
export NDT_HOSTS_PREFIX=ndtc
STATE=/tmp/ndtc-hosts

if [[ ! -x $BIN ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" --target comm_bench -j"$(nproc --all)" >/dev/null
fi
trap 'scripts/hosts.sh down >/dev/null 2>&1 || true' EXIT
scripts/hosts.sh up 2 >/dev/null

echo "hosts_comm: $(nproc --all) cores, $(mpirun --version | head -1)," \
  "OMP_NUM_THREADS=1, $ROUNDS rounds of --reps $REPS"
ARGS=(--max-bytes 16777216 --reps "$REPS")
run() {  # run LINK -> comm_bench output
  case $1 in
    shm) mpirun --allow-run-as-root --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
           "$BIN" "${ARGS[@]}" ;;
    *) "$STATE/mpirun" --allow-run-as-root --bind-to none --map-by node \
         -np 2 -x OMP_NUM_THREADS=1 "$BIN" "${ARGS[@]}" ;;
  esac
}
fit() {  # fit IMPL FIELD: FIELD of comm_bench's link_fit line in $out
  sed -n "s/^link_fit impl=$1 .* $2=\([^ ]*\).*/\1/p" <<<"$out"
}
summary=()
worst=
for link in shm veth 10gbit 1gbit; do
  case $link in
    veth) scripts/hosts.sh link off >/dev/null ;;
    10gbit | 1gbit) scripts/hosts.sh link "$link" >/dev/null ;;
  esac
  rows=()
  for ((r = 1; r <= ROUNDS; ++r)); do
    echo "== $link, round $r"
    out=$(run "$link")
    echo "$out"
    if grep -q WRONG <<<"$out"; then
      echo "hosts_comm: wrong all-reduce results on $link" >&2
      exit 1
    fi
    ratio=$(sed -n 's/^min_ratio_vs_mpi=//p' <<<"$out")
    rows+=("$ratio $(fit ndt alpha_us) $(fit ndt busbw_gbs) $(fit ndt max_rel_error) $(fit mpi alpha_us) $(fit mpi busbw_gbs) $(fit mpi max_rel_error)")
  done
  # The median round by its ratio.
  med=$(printf '%s\n' "${rows[@]}" | sort -g -k1,1 | sed -n "$(((ROUNDS + 1) / 2))p")
  all=$(printf '%s\n' "${rows[@]}" | awk '{print $1}' | tr '\n' ' ')
  summary+=("$link $med [$all]")
  if [[ $link != shm ]]; then
    r=${med%% *}
    if [[ -z $worst ]] || awk -v a="$r" -v b="$worst" 'BEGIN{exit !(a < b)}'; then
      worst=$r
    fi
  fi
done
echo
echo "summary: median round per link (ratio = mpi/ndt, smallest over sizes" \
  ">= 1 MiB; alpha-beta fits of that round: alpha per round in us, bus" \
  "bandwidth 1/beta, largest relative error over 4 KiB .. 16 MiB)"
printf '%-7s %6s  %9s %9s %7s  %9s %9s %7s  %s\n' link ratio ndt_alpha \
  ndt_GB/s ndt_err mpi_alpha mpi_GB/s mpi_err "ratios of all rounds"
for s in "${summary[@]}"; do
  read -r link ratio na nb ne ma mb me rest <<<"$s"
  printf '%-7s %6s  %9s %9s %7s  %9s %9s %7s  %s\n' "$link" "$ratio" "$na" \
    "$nb" "$ne" "$ma" "$mb" "$me" "$rest"
done
echo "min_ratio_vs_mpi=$worst"
