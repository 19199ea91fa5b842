#!/usr/bin/env bash
# Sequence parallelism benchmark (README, "Sequence parallelism").
#
# The GPT of bench/configs/gpt_long.yaml (dim 128, 2 causal blocks, 4
# heads, one sequence per step) under a cap on every rank's live memory as
# the allocator counts it (train.mem_cap_mb = NDT_SP_CAP_MB; parameters,
# gradients, AdamW state, activations, communication buffers, data):
#
# 1. Communication: build/tp_mode_comm_bench runs one training step at
#    seq_len 1024 at sp = 2 and 4 with each attention core (rsa, ring,
#    ulysses) and compares every process group's ledger with the plan's
#    step model (plan/step_comm.h, plan/sp_comm.h).
# 2. Longest sequence: for the serial engine (1 rank), each core at sp = 2
#    and 4, and 1D tensor parallelism with sequence-split regions
#    (parallel.tp_seq) at tp = 2 and 4, and ring and Ulysses at sp = 2
#    inside tp = 2 with tp_seq (4 ranks), the longest model.seq_len (a
#    multiple of 64) whose training step fits under the cap: doubling from
#    256, then bisection. A probe is two `ndtrain bench` steps (the second
#    holds the optimizer state the first step creates beside the
#    activations); it fails when a rank's allocation would pass the cap
#    ("memory cap exceeded").
# 3. Step time of each layout at its longest sequence and at the serial
#    engine's (NDT_BENCH_ITERS timed steps after one warm-up, under the
#    cap; one thread per rank; 4 ranks share the machine's cores).
#
# Last lines: max_comm_volume_error=X (must be 0) and max_seq_len_gain=X,
# the longest sequence at sp=4 (best core) over the serial engine's. Exits
# non-zero when a run fails for another reason than the cap, or X > 0.
#
# Builds nothing: needs build/ndtrain and build/tp_mode_comm_bench.
# Environment: NDT_SP_CAP_MB=64, NDT_BENCH_ITERS=2.
set -uo pipefail
cd "$(dirname "$0")/.."

for bin in build/ndtrain build/tp_mode_comm_bench; do
  if [[ ! -x $bin ]]; then
    echo "bench/sp.sh: $bin not found; build first:" >&2
    echo "  cmake --build build -j2 --target ndtrain tp_mode_comm_bench" >&2
    exit 2
  fi
done
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
CAP=${NDT_SP_CAP_MB:-64}
ITERS=${NDT_BENCH_ITERS:-2}
CFG=bench/configs/gpt_long.yaml
MPIRUN=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS)
STEP=64
status=0

echo "sp: $(nproc --all) cores, $(mpirun --version | head -1)," \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, cap ${CAP} MiB per rank"
echo

# ---- 1. Communication per step against the formula
max_err=0
for sp in 2 4; do
  for att in rsa ring ulysses; do
    # shellcheck disable=SC2086
    out=$("${MPIRUN[@]}" -np "$sp" build/tp_mode_comm_bench -c "$CFG" \
      train.threads=1 model.seq_len=1024 parallel.sp=$sp \
      parallel.sp_attention=$att 2>&1)
    rc=$?
    row=$(grep '^mode_comm_row' <<<"$out")
    err=$(sed -n 's/.*max_comm_volume_error=\([^ ]*\).*/\1/p' <<<"$row")
    if [[ $rc != 0 || -z $err ]]; then
      echo "$out"
      echo "bench/sp.sh: tp_mode_comm_bench sp=$sp $att failed (rc $rc)" >&2
      status=1
      err=inf
    fi
    printf 'comm sp=%d %-8s sp group bytes/step counted %s planned %s\n' \
      "$sp" "$att" \
      "$(grep -E '^  sp ' <<<"$out" | awk '{print $7}')" \
      "$(grep -E '^  sp ' <<<"$out" | awk '{print $9}')"
    max_err=$(/usr/bin/python3 -c "print(max(float('$max_err'), float('$err')))")
  done
done
echo

# ---- 2. Longest sequence under the cap
# probe NP ARGS... with T in $T: 0 fits, 1 passes the cap, 2 other failure.
probe() {
  local np=$1
  shift
  local cmd=(build/ndtrain bench -c "$CFG" train.threads=1
             train.mem_cap_mb="$CAP" model.seq_len="$T" "$@"
             --iters 1 --warmup 1)
  if [[ $np -gt 1 ]]; then
    cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}")
  fi
  out=$("${cmd[@]}" 2>&1)
  local rc=$?
  if [[ $rc == 0 ]]; then
    return 0
  fi
  if grep -q "memory cap exceeded" <<<"$out"; then
    return 1
  fi
  echo "$out" | tail -5 >&2
  return 2
}

# longest NP ARGS...: prints the longest fitting seq_len (0: not even 256).
longest() {
  local lo=0 hi=0 r
  T=256
  while true; do
    probe "$@"
    r=$?
    [[ $r == 2 ]] && { echo -1; return; }
    if [[ $r == 0 ]]; then
      lo=$T
      T=$((T * 2))
    else
      hi=$T
      break
    fi
  done
  [[ $lo == 0 ]] && { echo 0; return; }
  while ((hi - lo > STEP)); do
    T=$(((lo + hi) / 2 / STEP * STEP))
    probe "$@"
    r=$?
    [[ $r == 2 ]] && { echo -1; return; }
    if [[ $r == 0 ]]; then lo=$T; else hi=$T; fi
  done
  echo "$lo"
}

# step NP T ARGS...: "median_ms mem_peak_mib(rank 0)" of ITERS steps.
step() {
  local np=$1 t=$2
  shift 2
  local cmd=(build/ndtrain bench -c "$CFG" train.threads=1
             train.mem_cap_mb="$CAP" model.seq_len="$t" "$@"
             --iters "$ITERS" --warmup 1)
  if [[ $np -gt 1 ]]; then
    cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}")
  fi
  local out
  out=$("${cmd[@]}" 2>&1) || { echo "fail fail"; return; }
  echo "$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' <<<"$out")" \
       "$(sed -n 's/.*mem_peak_mib=\([0-9.]*\).*/\1/p' <<<"$out")"
}

layouts=(
  "1 serial"
  "2 rsa parallel.sp=2 parallel.sp_attention=rsa"
  "2 ring parallel.sp=2 parallel.sp_attention=ring"
  "2 ulysses parallel.sp=2 parallel.sp_attention=ulysses"
  "2 tp_seq parallel.tp=2 parallel.tp_seq=true"
  "4 rsa parallel.sp=4 parallel.sp_attention=rsa"
  "4 ring parallel.sp=4 parallel.sp_attention=ring"
  "4 ulysses parallel.sp=4 parallel.sp_attention=ulysses"
  "4 tp_seq parallel.tp=4 parallel.tp_seq=true"
  "4 ring+tp_seq parallel.sp=2 parallel.sp_attention=ring parallel.tp=2 parallel.tp_seq=true"
  "4 ulysses+tp_seq parallel.sp=2 parallel.sp_attention=ulysses parallel.tp=2 parallel.tp_seq=true"
)
declare -A maxlen
for spec in "${layouts[@]}"; do
  read -r np name args <<<"$spec"
  # shellcheck disable=SC2086
  n=$(longest "$np" $args)
  if [[ $n == -1 ]]; then
    echo "bench/sp.sh: $name at $np ranks failed for another reason than the cap" >&2
    status=1
  fi
  maxlen["$np $name"]=$n
  echo "longest np=$np $name seq_len=$n"
done
echo

# ---- 3. Step times
base=${maxlen["1 serial"]}
echo "GPT (dim 128, 2 blocks, 4 heads, batch 1), cap $CAP MiB per rank;" \
     "step times with 1 thread per rank on $(nproc --all) cores, median of $ITERS:"
printf '%-5s %-16s %10s %8s %12s %10s %14s %14s\n' ranks layout max_seq \
  vs_serial ms_at_max peak_MiB "ms_at_${base}" "peak_MiB_${base}"
for spec in "${layouts[@]}"; do
  read -r np name args <<<"$spec"
  n=${maxlen["$np $name"]}
  # shellcheck disable=SC2086
  read -r ms peak <<<"$(step "$np" "$n" $args)"
  # shellcheck disable=SC2086
  read -r ms0 peak0 <<<"$(step "$np" "$base" $args)"
  printf '%-5s %-16s %10s %8.2f %12s %10s %14s %14s\n' "$np" "$name" "$n" \
    "$(/usr/bin/python3 -c "print($n / max($base, 1))")" "$ms" "$peak" \
    "$ms0" "$peak0"
done
echo

best=0
for name in rsa ring ulysses; do
  n=${maxlen["4 $name"]}
  ((n > best)) && best=$n
done
echo "max_comm_volume_error=$max_err"
echo "max_seq_len_gain=$(/usr/bin/python3 -c "print(round($best / max($base, 1), 2))")"
if [[ $max_err != 0 && $max_err != 0.0 ]]; then
  status=1
fi
exit $status
