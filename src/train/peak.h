// Measured single-precision peaks of this machine with the current thread
// count: the FMA limit (the denominator of MFU, model FLOPs utilisation,
// in progress lines and benchmarks) and what sgemm reaches.
#pragma once

#include <cstdint>

namespace ndt {

// GFLOP/s of the widest fused multiply-add the build targets (AVX-512,
// else AVX2 FMA, else scalar) on every thread at once: independent
// accumulator chains, enough to cover the FMA latency on two ports, no
// memory traffic; best of the repetitions in at least 0.1 s.
double measure_fma_peak_gflops();

// Sizes of the square sgemm measured: by `ndtrain peak` and the planner
// (1536: three matrices of 27 MiB, ~0.3 s), and by every rank of a run at
// start, where it is only reported (768: 6.75 MiB, ~0.03 s; on the
// machines measured it gives the larger size's rate within a few percent,
// while 1024 runs 5-10% slower than either).
constexpr int kSgemmPeakN = 1536;
constexpr int kSgemmStartN = 768;

// GFLOP/s of square sgemm of size n, best of a few repetitions.
double measure_sgemm_peak_gflops(int n);
// The bytes measure_sgemm_peak_gflops(n) allocates (its three matrices, as
// the allocator counts them).
int64_t sgemm_peak_bytes(int n);

}  // namespace ndt
