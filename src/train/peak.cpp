#include "train/peak.h"

#include <omp.h>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>

#include "ops/ops.h"
#include "tensor/memory.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

// Independent FMA chains: 2 ports x 4 cycles of latency need 8; 12 leave
// room for a longer latency.
constexpr int kChains = 12;

// FLOPs of `iters` rounds of kChains FMAs on one thread; `sink` keeps the
// result alive.
double fma_rounds(int64_t iters, float* sink) {
#if defined(__AVX512F__)
  constexpr int kLanes = 16;
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k)
    acc[k] = _mm512_set1_ps(1.0f + 1e-3f * k);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kChains; ++k)
      acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps reads an
  // undefined vector and fails -Werror=uninitialized.
  float out[kLanes];
  for (int k = 1; k < kChains; ++k)
    acc[0] = _mm512_add_ps(acc[0], acc[k]);
  _mm512_storeu_ps(out, acc[0]);
  for (float v : out)
    *sink += v;
#elif defined(__FMA__)
  constexpr int kLanes = 8;
  __m256 acc[kChains];
  for (int k = 0; k < kChains; ++k)
    acc[k] = _mm256_set1_ps(1.0f + 1e-3f * k);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kChains; ++k)
      acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  }
  float out[kLanes];
  for (int k = 1; k < kChains; ++k)
    acc[0] = _mm256_add_ps(acc[0], acc[k]);
  _mm256_storeu_ps(out, acc[0]);
  for (float v : out)
    *sink += v;
#else
  constexpr int kLanes = 1;
  float acc[kChains];
  for (int k = 0; k < kChains; ++k)
    acc[k] = 1.0f + 1e-3f * k;
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kChains; ++k)
      acc[k] = acc[k] * 0.999999f + 1e-7f;
  }
  for (float v : acc)
    *sink += v;
#endif
  return 2.0 * kLanes * kChains * double(iters);
}

}  // namespace

double measure_fma_peak_gflops() {
  // Repetitions of ~10 ms (4 ms with full-width AVX-512) for at least 0.1
  // s: under a hypervisor a core can be away for tens of milliseconds, and
  // four repetitions at one training start gave 117 GFLOP/s at 2 threads,
  // one core's peak, on a machine that measures 232-235.
  const int64_t iters = 2'000'000;
  const auto start = std::chrono::steady_clock::now();
  double best = 0;
  float sink = 0;
  for (int rep = 0; rep < 4 || std::chrono::steady_clock::now() - start <
                                   std::chrono::milliseconds(100);
       ++rep) {
    double flops = 0;
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : flops, sink)
    { flops += fma_rounds(iters, &sink); }
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (rep > 0)
      best = std::max(best, flops / s / 1e9);
  }
  volatile float keep = sink;
  (void)keep;
  return best;
}

int64_t sgemm_peak_bytes(int n) {
  return 3 * static_cast<int64_t>(mem_block_bytes(sizeof(float) * n * n));
}

double measure_sgemm_peak_gflops(int n) {
  Tensor a({n, n}, MemTag::kOther), b({n, n}, MemTag::kOther),
      c({n, n}, MemTag::kOther);
  rng_fill_uniform(a.data(), a.numel(), rng_key(0, "peak.a"), 0, -1, 1);
  rng_fill_uniform(b.data(), b.numel(), rng_key(0, "peak.b"), 0, -1, 1);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    ops::gemm(
        false,
        false,
        n,
        n,
        n,
        1.0f,
        a.data(),
        n,
        b.data(),
        n,
        0.0f,
        c.data(),
        n);
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (rep > 0)
      best = std::max(best, 2.0 * n * n * double(n) / s / 1e9);
  }
  return best;
}

}  // namespace ndt
