#include "train/peak.h"

#include <algorithm>
#include <chrono>

#include "ops/ops.h"
#include "tensor/rng.h"

namespace ndt {

double measure_sgemm_peak_gflops() {
  const int n = 1536;
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
