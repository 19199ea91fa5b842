// ReduceOp and the element-wise reduction kernels every backend and
// algorithm of comm uses, so that a reduction means the same arithmetic
// wherever it runs.
//
// The kernels combine contiguous runs of `len` elements; the caller picks
// the order in which ranks are folded in (each backend documents its own).
// They do no communication and no allocation.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ndt {

enum class ReduceOp { kSum, kMax };

namespace detail {

// acc[k] = acc[k] op x[k] for k < len.
template <typename T>
inline void combine(T* acc, const T* x, int64_t len, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (int64_t k = 0; k < len; ++k)
      acc[k] += x[k];
  } else {
    for (int64_t k = 0; k < len; ++k)
      acc[k] = std::max(acc[k], x[k]);
  }
}

// out[k] = a[k] op b[k] for k < len; out may not overlap a or b.
template <typename T>
inline void combine_into(
    T* out, const T* a, const T* b, int64_t len, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (int64_t k = 0; k < len; ++k)
      out[k] = a[k] + b[k];
  } else {
    for (int64_t k = 0; k < len; ++k)
      out[k] = std::max(a[k], b[k]);
  }
}

}  // namespace detail
}  // namespace ndt
