#!/usr/bin/env bash
# ndtrain vs PyTorch: full fp32 training-step time for the three benchmark
# models (bench/configs/{mlp,vit,gpt}.yaml, mirrored by bench/pytorch_step.py)
# at 1 and 2 threads. Every run is its own process with the same thread
# environment. PyTorch runs twice: as installed (glibc's malloc, AdamW's
# per-tensor loop) and tuned as an expert would run it (glibc's malloc
# keeping its pages, GLIBC_TUNABLES below, AdamW with foreach=True, and
# the faster of ATen's default and AVX-512 kernels where the CPU has them);
# ndtrain runs with the same GLIBC_TUNABLES. Prints the environment, the
# FMA peak and the sgemm rate per thread count (each row's MFU divides by
# the FMA peak measured inside that row's ndtrain process), a table
# (ms per step, speedups, MFU) and, last, min_speedup_vs_pytorch=X against
# the tuned PyTorch.
# Method: docs/benchmarks.md.
#
# Environment:
#   NDT_SKIP_SETUP=1        do not run scripts/setup.sh (build/ndtrain must exist)
#   NDT_BENCH_ITERS=10      timed steps per run (median reported)
#   NDT_BENCH_WARMUP=3      untimed steps before them
#   NDT_BENCH_ROUNDS=3      rounds of the whole sweep; each side's fastest counts
#   NDT_BENCH_WAIT_POLICIES="PASSIVE ACTIVE"   OMP_WAIT_POLICY values tried
#                           above one thread (each side's faster counts)
#   NDT_BENCH_MODELS="mlp vit gpt", NDT_BENCH_THREADS="1 2"   subsets, for quick checks
#   NDT_BENCH_TIMEOUT=1800  seconds allowed per run
#   NDTRAIN=build/ndtrain   the binary under test
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/tuned_malloc.sh
source bench/tuned_malloc.sh

PY=/usr/bin/python3
NDTRAIN=${NDTRAIN:-build/ndtrain}
ITERS=${NDT_BENCH_ITERS:-10}
WARMUP=${NDT_BENCH_WARMUP:-3}
ROUNDS=${NDT_BENCH_ROUNDS:-3}
WAIT_POLICIES=${NDT_BENCH_WAIT_POLICIES:-PASSIVE ACTIVE}
MODELS=${NDT_BENCH_MODELS:-mlp vit gpt}
THREADS=${NDT_BENCH_THREADS:-1 2}
RUN_TIMEOUT=${NDT_BENCH_TIMEOUT:-1800}

die() {
  echo "vs_pytorch: error: $*" >&2
  exit 1
}

[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "NDT_BENCH_ROUNDS=$ROUNDS: must be a positive integer"
for pol in $WAIT_POLICIES; do
  [[ $pol == PASSIVE || $pol == ACTIVE ]] \
    || die "NDT_BENCH_WAIT_POLICIES: '$pol' is not an OpenMP wait policy (PASSIVE or ACTIVE)"
done
[[ -n $WAIT_POLICIES ]] || die "NDT_BENCH_WAIT_POLICIES is empty (allowed: PASSIVE, ACTIVE)"

have_torch() {
  [[ -x $PY ]] && "$PY" -c 'import torch' >/dev/null 2>&1
}

# --- setup ------------------------------------------------------------------
if [[ ${NDT_SKIP_SETUP:-0} != 1 ]]; then
  [[ -x scripts/setup.sh ]] || die "scripts/setup.sh not found or not executable"
  if have_torch; then
    scripts/setup.sh || die "scripts/setup.sh failed"
  else
    echo "vs_pytorch: $PY cannot import torch; running scripts/setup.sh --bench (installs python3-torch)"
    scripts/setup.sh --bench || die "scripts/setup.sh --bench failed"
  fi
fi
have_torch || die "$PY cannot import torch: run 'scripts/setup.sh --bench' (apt-get install python3-torch)"
[[ -x $NDTRAIN ]] || die "$NDTRAIN not found: run scripts/setup.sh (or unset NDT_SKIP_SETUP)"

LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/ndt_vs_pytorch.XXXXXX")
RESULTS=$LOGDIR/results.tsv
: >"$RESULTS"
echo "vs_pytorch: logs in $LOGDIR"

# --- environment --------------------------------------------------------------
echo "== environment"
if [[ -n ${OPENBLAS_CORETYPE+x} ]]; then
  echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set)"
else
  echo "OPENBLAS_CORETYPE is not set (OpenBLAS picks its kernel from cpuid)"
fi
other=$(env | grep -E '^OPENBLAS_' | grep -vE '^OPENBLAS_(CORETYPE|NUM_THREADS)=' | tr '\n' ' ' || true)
[[ -z $other ]] || echo "other OPENBLAS_* set (inherited by both sides): $other"
echo "per run: OMP_NUM_THREADS=N OPENBLAS_NUM_THREADS=N OMP_WAIT_POLICY=PASSIVE" \
  "(above one thread ndtrain and tuned PyTorch also run with each of: $WAIT_POLICIES)"
echo "ndtrain and tuned PyTorch: GLIBC_TUNABLES=$TUNED_MALLOC;" \
  "tuned PyTorch: AdamW(foreach=True); default PyTorch: no GLIBC_TUNABLES," \
  "AdamW(foreach=False) (torch 1.13's default)"
echo "ndtrain GEMM: NDT_GEMM=${NDT_GEMM:-onednn (unset)}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v n="$(nproc)" '{exit !($1 > 0.5 * n)}' /proc/loadavg; then
  echo "WARNING: the machine is busy (1-min load > half the cpus); timings will be noisy"
fi
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)," \
  "$(nproc) cpus online"
echo "ndtrain: $NDTRAIN"
ldd "$NDTRAIN" 2>/dev/null | grep -iE 'blas|lapack|gomp|omp' | sed 's/^[[:space:]]*/  /' || true
# openblas_get_config / corename of a library loaded in a Python process.
blas_info() {
  "$PY" - "$@" <<'EOF' || true
import ctypes, sys
import_torch = sys.argv[1] == "torch"
libs = []
if import_torch:
    import torch
    with open("/proc/self/maps") as f:
        libs = sorted({l.split()[-1] for l in f
                       if "blas" in l.lower() and l.split()[-1].startswith("/")})
    print(f"pytorch: torch {torch.__version__}, BLAS_INFO="
          + next((s.split("=", 1)[1] for s in torch.__config__.show().replace(",", "\n").split("\n")
                  if "BLAS_INFO" in s), "?"))
else:
    libs = sys.argv[2:]
for path in libs:
    info = path
    try:
        lib = ctypes.CDLL(path)
        for fn in ("openblas_get_config", "openblas_get_corename"):
            f = getattr(lib, fn, None)
            if f is not None:
                f.restype = ctypes.c_char_p
                info += f" | {f().decode()}"
    except OSError as e:
        info += f" | (not loadable: {e})"
    print("  " + info)
EOF
}
mapfile -t nd_blas < <(ldd "$NDTRAIN" 2>/dev/null | awk '/blas/ && $3 ~ /^\// {print $3}')
if ((${#nd_blas[@]})); then
  echo "ndtrain BLAS:"
  blas_info ndtrain "${nd_blas[@]}"
fi
blas_info torch

echo "tuned PyTorch: ATEN_CPU_CAPABILITY in {$TORCH_CAPS}, the faster run counts"

# --- helpers ------------------------------------------------------------------
# run_logged <log> <threads> <cmd...>: runs with the shared thread
# environment (and GLIBC_TUNABLES=$MALLOC when set), output to <log>; on
# failure prints the tail of the log and exits.
MALLOC=
WAIT=PASSIVE
run_logged() {
  local log=$1 n=$2
  shift 2
  local tun=()
  [[ -z $MALLOC ]] || tun=(GLIBC_TUNABLES="$MALLOC")
  if ! env "${tun[@]}" OMP_NUM_THREADS="$n" OPENBLAS_NUM_THREADS="$n" \
      OMP_WAIT_POLICY="$WAIT" timeout "$RUN_TIMEOUT" "$@" >"$log" 2>&1; then
    echo "---- tail of $log" >&2
    tail -n 20 "$log" >&2
    die "run failed: $*"
  fi
}

# field <line> <key>: value of key=value in line (empty if absent).
field() {
  tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -1
}

is_number() {
  [[ $1 =~ ^[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$ ]]
}

# --- FMA and sgemm peaks -----------------------------------------------------
# For the record; each row's MFU divides by the FMA peak measured inside
# that row's ndtrain run (fma_peak_gflops of its bench line).
echo "== FMA and sgemm peaks ($NDTRAIN peak)"
for n in $THREADS; do
  log=$LOGDIR/peak_t$n.log
  run_logged "$log" "$n" "$NDTRAIN" peak --threads "$n"
  line=$(grep -E '^peak_gflops=' "$log" | tail -1 || true)
  [[ -n $line ]] || die "no 'peak_gflops=' line from '$NDTRAIN peak --threads $n' (log: $log)"
  fma=$(field "$line" peak_gflops)
  is_number "$fma" || die "bad peak line: $line"
  echo "threads=$n peak_gflops=$fma (FMA) sgemm_gflops=$(field "$line" sgemm_gflops)"
done

# --- step timings -------------------------------------------------------------
# Rounds: this machine's speed drifts by 10-20% for minutes at a time, so
# the whole sweep (every model, thread count and side) runs ROUNDS times
# and each side's fastest run counts; a slow spell then hits one round of
# every side, not all rounds of one row. Above one thread every side also
# runs with each OpenMP wait policy in WAIT_POLICIES (the faster counts:
# ACTIVE spins, PASSIVE sleeps, which matters when a side has two thread
# pools). PyTorch as installed runs once, in the first round.
echo "== training steps (iters=$ITERS warmup=$WARMUP rounds=$ROUNDS)"
# faster <a> <b>: exit 0 when a < b (or b is empty).
faster() {
  [[ -z $2 ]] || awk -v a="$1" -v b="$2" 'BEGIN{exit !(a < b)}'
}
declare -A PT_DEFAULT=() ND_MS=() ND_PEAK=() ND_HOW=() PT_MS=() PT_HOW=() FLOPS=()
for r in $(seq 1 "$ROUNDS"); do
  echo "-- round $r of $ROUNDS"
  for m in $MODELS; do
    cfg=bench/configs/$m.yaml
    [[ -f $cfg ]] || die "missing $cfg"
    for n in $THREADS; do
      key=$m:$n
      policies=PASSIVE
      ((n == 1)) || policies=$WAIT_POLICIES
      if ((r == 1)); then
        log=$LOGDIR/pytorch_default_${m}_t$n.log
        MALLOC='' WAIT=PASSIVE run_logged "$log" "$n" "$PY" bench/pytorch_step.py \
          --model "$m" --threads "$n" --iters "$ITERS" --warmup "$WARMUP" --foreach 0
        pt=$(grep -E '^pytorch ' "$log" | tail -1 || true)
        [[ -n $pt ]] || die "no 'pytorch model=...' line from pytorch_step.py $m threads=$n default (log: $log)"
        echo "$pt (as installed)"
        PT_DEFAULT[$key]=$(field "$pt" median_ms)
        is_number "${PT_DEFAULT[$key]}" || die "bad pytorch line: $pt"
      fi
      for pol in $policies; do
        log=$LOGDIR/ndtrain_${m}_t${n}_${pol}_r$r.log
        MALLOC=$TUNED_MALLOC WAIT=$pol run_logged "$log" "$n" "$NDTRAIN" bench \
          -c "$cfg" "train.threads=$n" --iters "$ITERS" --warmup "$WARMUP"
        nd=$(grep -E '^bench ' "$log" | tail -1 || true)
        [[ -n $nd ]] || die "no 'bench model=...' line from ndtrain $m threads=$n (log: $log)"
        echo "$nd ($pol)"
        ms=$(field "$nd" median_ms)
        flops=$(field "$nd" flops_per_step)
        [[ $(field "$nd" model) == "$m" && $(field "$nd" threads) == "$n" ]] \
          || die "ndtrain line does not match model=$m threads=$n: $nd"
        { is_number "$ms" && is_number "$flops"; } || die "bad ndtrain line: $nd"
        # MFU's denominator: the FMA peak this process measured right
        # before and after its timed steps.
        peak=$(field "$nd" fma_peak_gflops)
        is_number "$peak" || die "no fma_peak_gflops in the ndtrain line: $nd"
        FLOPS[$key]=$flops
        if faster "$ms" "${ND_MS[$key]:-}"; then
          ND_MS[$key]=$ms ND_PEAK[$key]=$peak ND_HOW[$key]="round $r, $pol"
        fi
      done
      for cap in $TORCH_CAPS; do
        capenv=()
        [[ $cap == default ]] || capenv=(env ATEN_CPU_CAPABILITY="$cap")
        for pol in $policies; do
          log=$LOGDIR/pytorch_tuned_${cap}_${m}_t${n}_${pol}_r$r.log
          MALLOC=$TUNED_MALLOC WAIT=$pol run_logged "$log" "$n" "${capenv[@]}" \
            "$PY" bench/pytorch_step.py --model "$m" --threads "$n" \
            --iters "$ITERS" --warmup "$WARMUP" --foreach 1
          pt=$(grep -E '^pytorch ' "$log" | tail -1 || true)
          [[ -n $pt ]] || die "no 'pytorch model=...' line from pytorch_step.py $m threads=$n tuned (log: $log)"
          echo "$pt (tuned, ATen $cap, $pol)"
          ms=$(field "$pt" median_ms)
          [[ $(field "$pt" model) == "$m" && $(field "$pt" threads) == "$n" ]] \
            || die "pytorch line does not match model=$m threads=$n: $pt"
          is_number "$ms" || die "bad pytorch line: $pt"
          if faster "$ms" "${PT_MS[$key]:-}"; then
            PT_MS[$key]=$ms PT_HOW[$key]="round $r, ATen $cap, $pol"
          fi
        done
      done
    done
  done
done
echo "== fastest runs"
for m in $MODELS; do
  for n in $THREADS; do
    key=$m:$n
    echo "$m threads=$n: ndtrain ${ND_MS[$key]} ms (${ND_HOW[$key]}), tuned PyTorch ${PT_MS[$key]} ms (${PT_HOW[$key]})"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$n" "${ND_MS[$key]}" \
      "${PT_DEFAULT[$key]}" "${PT_MS[$key]}" "${FLOPS[$key]}" "${ND_PEAK[$key]}" >>"$RESULTS"
  done
done

# --- table ------------------------------------------------------------------
echo "== results"
"$PY" - "$RESULTS" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
if not rows:
    sys.exit("vs_pytorch: error: no results")
hdr = ("model", "threads", "ndtrain_ms", "pt_default", "pt_tuned",
       "vs_default", "vs_tuned", "ndtrain_mfu", "pt_tuned_mfu", "gflop/step")
print("%-6s %7s %11s %11s %11s %10s %9s %12s %13s %10s" % hdr)
speedups = []
for m, n, nd_ms, pd_ms, pt_ms, flops, peak in rows:
    nd_ms, pd_ms, pt_ms, flops, peak = map(
        float, (nd_ms, pd_ms, pt_ms, flops, peak))
    if min(nd_ms, pd_ms, pt_ms, peak) <= 0:
        sys.exit(f"vs_pytorch: error: non-positive value in {m} threads={n}")
    s = pt_ms / nd_ms
    speedups.append(s)
    mfu = lambda ms: flops / (ms / 1e3) / (peak * 1e9)
    print("%-6s %7s %11.2f %11.2f %11.2f %9.2fx %8.2fx %11.1f%% %12.1f%% %10.2f"
          % (m, n, nd_ms, pd_ms, pt_ms, pd_ms / nd_ms, s, 100 * mfu(nd_ms),
             100 * mfu(pt_ms), flops / 1e9))
print("min_speedup_vs_pytorch=%.2f" % min(speedups))
EOF
