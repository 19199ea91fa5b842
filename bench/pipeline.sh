#!/usr/bin/env bash
# Pipeline parallelism benchmark: 2 stages of equal cost, 1 rank (1 thread)
# per core, a GPT of 8 blocks split 4/4 (configs/verify/gpt.yaml with the
# overrides below; stage 0 also has the embedding, stage 1 the head, which
# makes it a few % slower), a fixed micro-batch of $MBS samples, global
# batch M*MBS. Results and how to read them: docs/pipeline.md.
#
# For M in {1,2,4,8,16}:
#   bubble:  measured by `ndtrain bench` from the executor's own timestamps
#            over the timed steps,
#              1 - sum(forward/backward time over both ranks) / (P * makespan)
#            (makespan: earliest entry to latest end of compute over the
#            pipeline's ranks), for gpipe and 1f1b, beside the theoretical
#            (P-1)/(M+P-1).
#   memory:  peak activation memory (MemTag acts, live bytes, peaks reset
#            after warm-up) of each stage for gpipe, 1f1b and 1f1b with
#            block recompute.
# Last line: max_bubble_error=X, the largest |measured - theoretical| over
# both schedules and M >= 4.
#
# Environment (defaults are what docs/pipeline.md reports):
#   NDTRAIN=build/ndtrain      the binary
#   NDT_BENCH_ITERS=4          timed steps per run
#   NDT_BENCH_WARMUP=2         untimed steps per run
#   NDT_PP_REPEATS=3           runs per (schedule, M); the tables show the
#                              median over runs (a burst of other load on
#                              one core during one run moves that run's
#                              bubble; the spread columns show by how much)
#   NDT_PP_MBS=8               samples per micro-batch
#   NDT_PP_MS="1 2 4 8 16"     micro-batch counts
#   NDT_PP_TRACE=1             0 skips the breakdown below
# The recompute runs are only there for memory: 1 run, 1 warm-up, 2 steps.
#
# Breakdown: where the measured bubble exceeds the theory. For the largest M,
# one `ndtrain train ... train.trace=true` run per schedule; bench/plot_trace.py
# --table replays every traced step (but the first) with (a) the mean F and
# B duration over both ranks (equal stages: gives the theory exactly), (b)
# each rank's own means (adds stage imbalance), (c) the measured durations
# (adds per-micro-batch jitter); what the measured makespan adds on top is
# communication and gaps between instructions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NDTRAIN=${NDTRAIN:-build/ndtrain}
ITERS=${NDT_BENCH_ITERS:-4}
WARMUP=${NDT_BENCH_WARMUP:-2}
REPEATS=${NDT_PP_REPEATS:-3}
TRACE=${NDT_PP_TRACE:-1}
MBS=${NDT_PP_MBS:-8}
MS=${NDT_PP_MS:-1 2 4 8 16}
P=2

if [[ ! -x $NDTRAIN ]]; then
  echo "error: $NDTRAIN not found; build it first with scripts/setup.sh" \
       "(builds Release into build/)" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null; then
  echo "error: mpirun not found; scripts/setup.sh installs OpenMPI" >&2
  exit 1
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

MODEL=(model.dim=256 model.heads=4 model.mlp_dim=1024 model.depth=8
       model.seq_len=64 model.dropout=0)
echo "pipeline: $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "P=$P, micro-batch $MBS samples, iters=$ITERS warmup=$WARMUP" \
     "repeats=$REPEATS"
echo "model: configs/verify/gpt.yaml ${MODEL[*]}"

field() {  # field NAME LINE
  sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"
}

run() {  # run SCHEDULE RECOMPUTE M ITERS WARMUP -> the bench line
  local out
  out=$(mpirun --oversubscribe --bind-to none -np $P "$NDTRAIN" bench \
        -c configs/verify/gpt.yaml "${MODEL[@]}" train.threads=1 \
        parallel.pp=$P parallel.schedule="$1" parallel.recompute="$2" \
        parallel.microbatches="$3" train.batch_size=$(($3 * MBS)) \
        --iters "$4" --warmup "$5" 2>&1) || {
    echo "error: ndtrain bench failed (schedule=$1 recompute=$2 M=$3):" >&2
    echo "$out" >&2
    exit 1
  }
  grep '^bench ' <<<"$out"
}

# One record per run: M schedule recompute median_ms bubble theory act0 act1
records=()
record() {  # record SCHEDULE RECOMPUTE M ITERS WARMUP
  local line acts
  line=$(run "$@")
  echo "$line"
  acts=$(field act_peak_mib "$line")
  records+=("$3 $1 $2 $(field median_ms "$line") $(field bubble "$line")"`
           `" $(field bubble_theory "$line") ${acts%,*} ${acts#*,}")
}
for m in $MS; do
  for ((r = 0; r < REPEATS; ++r)); do
    record gpipe none "$m" "$ITERS" "$WARMUP"
    record 1f1b none "$m" "$ITERS" "$WARMUP"
  done
  record 1f1b block "$m" 2 1
done

echo
summary=$(printf '%s\n' "${records[@]}" | /usr/bin/python3 -c '
import statistics, sys
P = int(sys.argv[1])
runs = {}
for line in sys.stdin:
    m, s, r, ms, b, th, a0, a1 = line.split()
    runs.setdefault((int(m), s if r == "none" else s + "+rc"), []).append(
        (float(ms), float(b), float(a0), float(a1)))
med = lambda k, i: statistics.median(x[i] for x in runs[k])
spread = lambda k, i: max(x[i] for x in runs[k]) - min(x[i] for x in runs[k])
Ms = sorted({m for m, _ in runs})

print("bubble fraction, P=%d: measured (median over runs) vs theory "
      "(P-1)/(M+P-1)" % P)
print("%4s %8s %8s %8s %10s %10s %8s %8s %9s %9s" % (
    "M", "gpipe", "1f1b", "theory", "gpipe_err", "1f1b_err",
    "g_spread", "o_spread", "gpipe_ms", "1f1b_ms"))
err = 0.0
for m in Ms:
    g, o = (m, "gpipe"), (m, "1f1b")
    th = (P - 1) / (m + P - 1)
    eg, eo = med(g, 1) - th, med(o, 1) - th
    if m >= 4:
        err = max(err, abs(eg), abs(eo))
    print("%4d %8.4f %8.4f %8.4f %+10.4f %+10.4f %8.4f %8.4f %9.1f %9.1f" % (
        m, med(g, 1), med(o, 1), th, eg, eo, spread(g, 1), spread(o, 1),
        med(g, 0), med(o, 0)))

print()
print("peak activation memory per stage, MiB (stage 0 / stage 1)")
vs = ["gpipe", "1f1b", "1f1b+rc"]
print("%4s" % "M" + "".join("%20s" % v for v in vs) + "%10s" % "rc_ms")
act = lambda m, v, st: max(x[2 + st] for x in runs[(m, v)])
for m in Ms:
    print("%4d" % m + "".join(
        "%20s" % ("%.2f / %.2f" % (act(m, v, 0), act(m, v, 1))) for v in vs)
        + "%10.1f" % med((m, "1f1b+rc"), 0))

print()
lo, hi = (2, 16) if 2 in Ms and 16 in Ms else (Ms[0], Ms[-1])
print("growth peak(M=%d)/peak(M=%d) per stage, and micro-batches held at "
      "M=%d (peak / gpipe peak at M=%d)" % (hi, lo, hi, Ms[0]))
print("%-8s %8s %8s %10s %10s" % ("", "stage0", "stage1", "mb_held0",
                                  "mb_held1"))
for v in vs:
    r = [act(hi, v, st) / act(lo, v, st) for st in (0, 1)]
    h = [act(hi, v, st) / act(Ms[0], "gpipe", st) for st in (0, 1)]
    print("%-8s %8.2f %8.2f %10.2f %10.2f" % (v, r[0], r[1], h[0], h[1]))
print("max_bubble_error=%.4f" % err)
' "$P")
grep -v '^max_bubble_error=' <<<"$summary"

if [[ $TRACE == 1 ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mmax=$(tr ' ' '\n' <<<"$MS" | sort -n | tail -1)
  echo
  echo "bubble breakdown at M=$mmax (train.trace, steps 2-5, replayed;" \
       "bench/plot_trace.py --table)"
  for s in gpipe 1f1b; do
    mpirun --oversubscribe --bind-to none -np $P "$NDTRAIN" train \
      -c configs/verify/gpt.yaml "${MODEL[@]}" train.threads=1 \
      parallel.pp=$P parallel.schedule=$s parallel.microbatches="$mmax" \
      train.batch_size=$((mmax * MBS)) train.trace=true train.steps=6 \
      train.eval_samples=16 run.dir="$tmp/$s" >"$tmp/$s.log" 2>&1 || {
      echo "error: ndtrain train failed ($s):" >&2; cat "$tmp/$s.log" >&2
      exit 1
    }
    echo "$s:"
    /usr/bin/python3 bench/plot_trace.py "$tmp/$s/trace.json" --table |
      grep -v '^clock shifts'
  done
fi
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
grep '^max_bubble_error=' <<<"$summary"
