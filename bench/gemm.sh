#!/usr/bin/env bash
# GEMM-only ceiling on MFU (bench/gemm_bench.cpp): the matrix products of
# one training step of each benchmark model, timed alone with the GEMM
# library in use (NDT_GEMM, default onednn), against the FMA peak measured
# in the same run. One line per model:
#   gemm model=M threads=T ... gemm_gflops=G fma_peak_gflops=P ceiling=G/P
#     cold_gflops=C cold_ceiling=C/P
# `ndtrain bench`'s MFU on that model cannot exceed its ceiling by more
# than the machine's drift (the products are timed on warm caches).
# cold_ceiling times every call on operands fresh from memory, as a step's
# activations are: the nearer bound (docs/benchmarks.md).
#
# Environment:
#   NDT_BUILD_DIR=build     build directory (gemm_bench is built if missing)
#   NDT_BENCH_THREADS="1"   thread counts
# Arguments: models (mlp vit gpt; default all three).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${NDT_BUILD_DIR:-build}
BIN=$BUILD/gemm_bench
if [[ ! -x $BIN ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" --target gemm_bench -j"$(nproc)" >/dev/null
fi
echo "gemm: $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}" \
  "NDT_GEMM=${NDT_GEMM:-<unset>}"
for t in ${NDT_BENCH_THREADS:-1}; do
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$BIN" "$@"
done
