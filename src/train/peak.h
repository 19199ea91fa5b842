// Measured single-precision GEMM peak of this machine, the denominator of
// MFU (model FLOPs utilisation) in progress lines and benchmarks.
#pragma once

namespace ndt {

// GFLOP/s of square sgemm (n = 1024..2048) with the current thread count,
// best of a few repetitions (~0.5 s).
double measure_sgemm_peak_gflops();

}  // namespace ndt
