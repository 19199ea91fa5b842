#!/usr/bin/env bash
# All-reduce bus bandwidth of ndt's ProcessGroup::all_reduce vs raw
# MPI_Allreduce on the same buffers (bench/comm_bench.cpp), under mpirun.
# Prints a table (4 KiB .. 64 MiB by powers of 4) and, last,
# min_ratio_vs_mpi=X over sizes >= 1 MiB (ratio = mpi_time / ndt_time;
# >= 1 means ndt is at least as fast).
#
# Environment:
#   NDT_BUILD_DIR=build     build directory (comm_bench is built if missing)
#   NDT_COMM_NP=2           ranks
# Extra arguments go to comm_bench (--reps, --chunk-bytes, --max-bytes, ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${NDT_BUILD_DIR:-build}
NP=${NDT_COMM_NP:-2}
BIN=$BUILD/comm_bench

if [[ ! -x $BIN ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" --target comm_bench -j"$(nproc)" >/dev/null
fi

echo "comm: $(nproc) cores, $(mpirun --version | head -1)"
exec mpirun --allow-run-as-root --oversubscribe -np "$NP" \
  -x OMP_NUM_THREADS=1 "$BIN" "$@"
