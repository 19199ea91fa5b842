#!/usr/bin/env bash
# Tensor parallelism benchmark, every mode (docs/tensor_parallel.md).
#
# 1. Communication volume: build/tp_comm_bench at tp=2 and tp=4 builds each
#    tensor-parallel layer (column, row, MLP pair, attention, transformer
#    block, vocab-parallel embedding, vocab-parallel LM head) and the whole
#    GPT of configs/fortunes_gpt.yaml with Tp1dBuilder, without and with
#    sequence parallelism, runs one forward + backward and prints the
#    elements counted by the process group (CommLedger) against the
#    analytic 1D volume, per pass and per step.
# 1b. Every mode, whole steps: build/tp_mode_comm_bench runs one training
#    step of configs/fortunes_gpt.yaml on fortunes under 1d and 2d at 4
#    ranks and 1d, 2.5d (d=2) and 3d at 8 ranks (model.heads=8 at 8 ranks,
#    so that 1d splits the heads), and compares every process group's
#    ledger with the plan's step model (plan/step_comm.h); it prints rank
#    0's bytes per step as a table, and its model state (parameters,
#    gradients, optimizer; the allocator's ledger against the plan's
#    rank_memory) with the measured activation peak. Then the plan's
#    prediction for one GPT-2-medium-sized block at 64 and 512 ranks
#    (--predict).
# 2. Step time: `ndtrain bench` on configs/fortunes_gpt.yaml (fortunes
#    data, batch 16) at tp=1 (1 rank, 1 and 2 threads) and tp=2 (2 ranks,
#    1 thread each; without and with parallel.tp_seq). Each configuration
#    runs NDT_TP_ROUNDS times, interleaved; the median (and the minimum)
#    over rounds of each run's median step time is reported, with ratios
#    to tp=1. The load average is printed per round: the cores may be
#    shared, and a busy core stalls every collective of a tp=2 step.
# 3. Where tp=2's time goes: build/tp_comm_bench --time (forward + backward
#    of the GPT alone, no optimizer) at tp=1 and tp=2, split into time
#    inside collectives (including waiting for the other rank) and the
#    rest.
# Last line: max_comm_volume_error=X, the largest relative difference
# between counted and analytic volume over all layers, modes, passes and
# tp sizes. Exits non-zero when a run fails or X > 0.01.
#
# Builds nothing: needs build/ndtrain and build/tp_comm_bench (see README:
# scripts/setup.sh builds build/; then
#   cmake --build build -j2 --target tp_comm_bench tp_mode_comm_bench
#   ndtrain).
#
# Environment: NDT_BENCH_ITERS=20, NDT_BENCH_WARMUP=3, NDT_TP_ROUNDS=3.
set -uo pipefail
cd "$(dirname "$0")/.."

for bin in build/ndtrain build/tp_comm_bench build/tp_mode_comm_bench; do
  if [[ ! -x $bin ]]; then
    echo "bench/tp.sh: $bin not found; build first:" >&2
    echo "  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&" \
         "cmake --build build -j2 --target tp_comm_bench tp_mode_comm_bench ndtrain" >&2
    exit 2
  fi
done

if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
ITERS=${NDT_BENCH_ITERS:-20}
WARMUP=${NDT_BENCH_WARMUP:-3}
ROUNDS=${NDT_TP_ROUNDS:-3}
CFG=configs/fortunes_gpt.yaml
MPIRUN=(mpirun --oversubscribe --bind-to none)
status=0

echo "tp: $(nproc) cores, $(mpirun --version | head -1)"
echo

# ---- 1. Communication volume
max_err=0
for np in 2 4; do
  out=$("${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 build/tp_comm_bench)
  rc=$?
  echo "$out"
  echo
  if [[ $rc != 0 ]]; then
    echo "bench/tp.sh: tp_comm_bench at tp=$np failed (rc $rc)" >&2
    status=1
  fi
  err=$(sed -n 's/.*max_comm_volume_error=\([^ ]*\).*/\1/p' <<<"$out")
  if [[ -z $err ]]; then
    err=inf
    status=1
  fi
  max_err=$(/usr/bin/python3 -c "print(max(float('$max_err'), float('$err')))")
done

# ---- 1b. Every mode, whole steps, against the plan's step model
mode_rows=()
mem_rows=()
for spec in "1 serial" "4 1d parallel.tp=4" "4 2d parallel.tp=4 parallel.tp_mode=2d" \
    "8 1d parallel.tp=8 model.heads=8" \
    "8 2.5d parallel.tp=8 parallel.tp_mode=2.5d parallel.tp_depth=2 model.heads=8" \
    "8 3d parallel.tp=8 parallel.tp_mode=3d model.heads=8"; do
  read -r np mode args <<<"$spec"
  # shellcheck disable=SC2086
  out=$("${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 \
    build/tp_mode_comm_bench -c "$CFG" train.threads=1 $args 2>&1)
  rc=$?
  echo "$out"
  row=$(grep '^mode_comm_row' <<<"$out")
  err=$(sed -n 's/.*max_comm_volume_error=\([^ ]*\).*/\1/p' <<<"$row")
  if [[ $rc != 0 || -z $err ]]; then
    echo "bench/tp.sh: tp_mode_comm_bench $mode at $np ranks failed (rc $rc)" >&2
    status=1
    err=inf
  fi
  max_err=$(/usr/bin/python3 -c "print(max(float('$max_err'), float('$err')))")
  mode_rows+=("$np $mode $(sed -n 's/.*rank0_bytes_per_step=\([0-9]*\).*/\1/p' <<<"$row") $(sed -n 's/.*planned=\([0-9]*\).*/\1/p' <<<"$row")")
  mem=$(grep '^mode_mem_row' <<<"$out")
  mem_rows+=("$np $mode $(for k in params_elements params_bytes params_planned grads_bytes grads_planned optim_bytes optim_planned acts_peak_bytes acts_blocks_planned acts_step_planned; do sed -n "s/.* $k=\([0-9]*\).*/\1/p" <<<"$mem"; done | tr '\n' ' ')")
done
echo
echo "per-rank bytes per step (rank 0, ledger units), $CFG, batch 16 x 128:"
printf '%-6s %-6s %14s %14s %10s\n' ranks mode counted planned MiB
for r in "${mode_rows[@]}"; do
  read -r np mode got want <<<"$r"
  printf '%-6s %-6s %14s %14s %10.2f\n' "$np" "$mode" "$got" "$want" \
    "$(/usr/bin/python3 -c "print(${got:-0} / 2**20)")"
done
echo
echo "model state per rank (rank 0, allocator ledger, live after the step)" \
     "against the plan (rank_memory elements; planned_blocks: the same" \
     "tensors in the allocator's size classes), the measured activation peak" \
     "against the plan's step model (step_planned) and the forward state" \
     "of every block in it (blocks_planned, plan/activation_memory.h):"
printf '%-6s %-6s %10s %10s %10s %10s %10s %10s %10s %11s %12s %14s\n' ranks \
  mode params_el params_B planned grads_B planned optim_B planned \
  acts_peak_B step_planned blocks_planned
for r in "${mem_rows[@]}"; do
  read -r -a f <<<"$r"
  printf '%-6s %-6s %10s %10s %10s %10s %10s %10s %10s %11s %12s %14s\n' \
    "${f[@]:0:10}" "${f[11]}" "${f[10]}"
done
echo
build/tp_mode_comm_bench --predict
echo

# ---- 2. Step time
field() {  # field NAME LINE
  sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"
}

names=(tp1_t1 tp1_t2 tp2 tp2_seq)
run_config() {  # run_config NAME -> bench line
  local common=(bench -c "$CFG" --iters "$ITERS" --warmup "$WARMUP")
  case $1 in
    tp1_t1) OMP_NUM_THREADS=1 build/ndtrain "${common[@]}" train.threads=1 ;;
    tp1_t2) OMP_NUM_THREADS=2 build/ndtrain "${common[@]}" train.threads=2 ;;
    tp2) "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 build/ndtrain \
           "${common[@]}" train.threads=1 parallel.tp=2 ;;
    tp2_seq) "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 build/ndtrain \
               "${common[@]}" train.threads=1 parallel.tp=2 \
               parallel.tp_seq=true ;;
  esac
}

declare -A times
echo "step time: $CFG (batch 16 x 128 tokens), $ITERS timed steps after" \
     "$WARMUP warm-up, $ROUNDS rounds"
for ((r = 1; r <= ROUNDS; ++r)); do
  for n in "${names[@]}"; do
    line=$(run_config "$n" 2>&1 | grep '^bench ')
    ms=$(field median_ms "$line")
    if [[ -z $ms ]]; then
      echo "bench/tp.sh: ndtrain bench failed for $n" >&2
      status=1
      ms=nan
    fi
    echo "round $r $n (load $(cut -d' ' -f1 /proc/loadavg)): $line"
    times[$n]+="$ms "
  done
done
echo
/usr/bin/python3 - "${times[tp1_t1]}" "${times[tp1_t2]}" "${times[tp2]}" \
  "${times[tp2_seq]}" <<'EOF'
import statistics, sys
names = ["tp1_t1", "tp1_t2", "tp2", "tp2_seq"]
desc = {
    "tp1_t1": "tp=1, 1 rank x 1 thread",
    "tp1_t2": "tp=1, 1 rank x 2 threads",
    "tp2": "tp=2, 2 ranks x 1 thread",
    "tp2_seq": "tp=2 + seq. parallel, 2 x 1",
}
med = {}
for n, s in zip(names, sys.argv[1:]):
    v = [float(x) for x in s.split()]
    med[n] = statistics.median(v)
lo = {n: min(float(x) for x in s.split()) for n, s in zip(names, sys.argv[1:])}
print(f"{'config':<30} {'median_ms':>10} {'min_ms':>8} {'vs tp1_t1':>10} "
      f"{'vs tp1_t2':>10} {'min vs min t2':>14}")
for n in names:
    print(f"{desc[n]:<30} {med[n]:10.1f} {lo[n]:8.1f} "
          f"{med[n] / med['tp1_t1']:10.3f} {med[n] / med['tp1_t2']:10.3f} "
          f"{lo[n] / lo['tp1_t2']:14.3f}")
print("(ratio = time / time of the tp=1 configuration; < 1: faster)")
EOF

# ---- 3. Compute vs collectives
echo
for np in 1 2; do
  "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 build/tp_comm_bench \
    --time "$ITERS" | grep '^tp_time' || status=1
done
echo
echo "max_comm_volume_error=$max_err"
if ! /usr/bin/python3 -c "import sys; sys.exit(0 if float('$max_err') <= 0.01 else 1)"; then
  status=1
fi
exit $status
