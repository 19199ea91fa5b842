// Elementwise helpers: residual add, in-place add and scale, sum of squares.
//
//   y, a, b, x  any shape, same numel (outputs may alias inputs).
// sum_squares accumulates in double over fixed chunks, added in order, so
// its result does not depend on the thread count.
#include <algorithm>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kMinChunk = 1 << 16;

}  // namespace

void add(Tensor& y, const Tensor& a, const Tensor& b) {
  NDT_ASSERT(
      y.numel() == a.numel() && b.numel() == a.numel(),
      "add y ",
      shape_str(y.shape()),
      " a ",
      shape_str(a.shape()),
      " b ",
      shape_str(b.shape()));
  const int64_t n = a.numel();
  const float* ap = a.data();
  const float* bp = b.data();
  float* yp = y.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    yp[i] = ap[i] + bp[i];
}

void add_(Tensor& y, const Tensor& x) {
  NDT_ASSERT(
      y.numel() == x.numel(),
      "add_ y ",
      shape_str(y.shape()),
      " x ",
      shape_str(x.shape()));
  const int64_t n = y.numel();
  const float* xp = x.data();
  float* yp = y.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    yp[i] += xp[i];
}

void scale_(Tensor& y, float s) {
  const int64_t n = y.numel();
  float* yp = y.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    yp[i] *= s;
}

void zero_(Tensor& y) {
  const int64_t n = y.numel();
  float* yp = y.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    yp[i] = 0.0f;
}

double sum_squares(const Tensor& x) {
  const int64_t n = x.numel();
  const float* xp = x.data();
  const int64_t chunk = std::max(kMinChunk, (n + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = (n + chunk - 1) / chunk;
  double part[kMaxChunks];
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i0 = ch * chunk, i1 = std::min(n, i0 + chunk);
    double acc[detail::kLanes] = {};
    int64_t i = i0;
    for (; i + detail::kLanes <= i1; i += detail::kLanes) {
      for (int j = 0; j < detail::kLanes; ++j) {
        const double v = xp[i + j];
        acc[j] += v * v;
      }
    }
    for (int j = 0; i + j < i1; ++j) {
      const double v = xp[i + j];
      acc[j] += v * v;
    }
    double s = 0.0;
    for (int j = 0; j < detail::kLanes; ++j)
      s += acc[j];
    part[ch] = s;
  }
  double total = 0.0;
  for (int64_t ch = 0; ch < chunks; ++ch)
    total += part[ch];
  return total;
}

}  // namespace ndt::ops
