// Measured single-precision peaks of this machine with the current thread
// count: the FMA limit (the denominator of MFU, model FLOPs utilisation,
// in progress lines and benchmarks) and what sgemm reaches.
#pragma once

#include <cstdint>

namespace ndt {

// GFLOP/s of the widest fused multiply-add the build targets (AVX-512,
// else AVX2 FMA, else scalar) on every thread at once: independent
// accumulator chains, enough to cover the FMA latency on two ports, no
// memory traffic; best of a few repetitions (~0.3 s).
double measure_fma_peak_gflops();

// GFLOP/s of square sgemm (n = 1536), best of a few repetitions (~0.5 s).
double measure_sgemm_peak_gflops();
// The bytes measure_sgemm_peak_gflops allocates (its three matrices, as
// the allocator counts them; 27 MiB).
int64_t sgemm_peak_bytes();

}  // namespace ndt
