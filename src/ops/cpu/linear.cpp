// Linear layer y = x w^T + b with torch.nn.Linear's weight layout.
//
//   x  [N, IC] (any leading dims, flattened to N rows)
//   w  [OC, IC], b [OC] or undefined
//   y  [N, OC]
// Backward: dx [N, IC] = dy w (assigned; skipped if undefined),
// dw [OC, IC] += dy^T x, db [OC] += column sums of dy (accumulated).
#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {

void linear_forward(
    Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  NDT_ASSERT(w.ndim() == 2, "linear weight ", shape_str(w.shape()));
  const int64_t OC = w.dim(0), IC = w.dim(1);
  NDT_ASSERT(
      x.dim(-1) == IC,
      "linear x ",
      shape_str(x.shape()),
      " w ",
      shape_str(w.shape()));
  const int64_t N = x.numel() / IC;
  NDT_ASSERT(
      y.dim(-1) == OC && y.numel() == N * OC,
      "linear y ",
      shape_str(y.shape()),
      " for x ",
      shape_str(x.shape()));
  float* yp = y.data();
  float beta = 0.0f;
  if (b.defined()) {
    NDT_ASSERT(b.numel() == OC, "linear bias ", shape_str(b.shape()));
    // Seed y with the bias and let the GEMM accumulate onto it (beta = 1):
    // with beta = 0 OpenBLAS would clear y in a pass of its own anyway.
    const float* bp = b.data();
    const bool threaded = N * OC >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
    for (int64_t n = 0; n < N; ++n) {
      float* row = yp + n * OC;
      for (int64_t o = 0; o < OC; ++o)
        row[o] = bp[o];
    }
    beta = 1.0f;
  }
  gemm(
      false,
      true,
      static_cast<int>(N),
      static_cast<int>(OC),
      static_cast<int>(IC),
      1.0f,
      x.data(),
      static_cast<int>(IC),
      w.data(),
      static_cast<int>(IC),
      beta,
      yp,
      static_cast<int>(OC));
}

void linear_backward(
    Tensor& dx,
    Tensor& dw,
    Tensor& db,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w) {
  NDT_ASSERT(w.ndim() == 2, "linear weight ", shape_str(w.shape()));
  const int64_t OC = w.dim(0), IC = w.dim(1);
  NDT_ASSERT(x.dim(-1) == IC, "linear x ", shape_str(x.shape()));
  const int64_t N = x.numel() / IC;
  NDT_ASSERT(
      dy.dim(-1) == OC && dy.numel() == N * OC,
      "linear dy ",
      shape_str(dy.shape()),
      " for x ",
      shape_str(x.shape()));
  const int n = static_cast<int>(N), oc = static_cast<int>(OC),
            ic = static_cast<int>(IC);
  if (dx.defined()) {
    NDT_ASSERT(dx.numel() == N * IC, "linear dx ", shape_str(dx.shape()));
    gemm(
        false,
        false,
        n,
        ic,
        oc,
        1.0f,
        dy.data(),
        oc,
        w.data(),
        ic,
        0.0f,
        dx.data(),
        ic);
  }
  if (dw.defined()) {
    NDT_ASSERT(dw.numel() == OC * IC, "linear dw ", shape_str(dw.shape()));
    gemm(
        true,
        false,
        oc,
        ic,
        n,
        1.0f,
        dy.data(),
        oc,
        x.data(),
        ic,
        1.0f,
        dw.data(),
        ic);
  }
  if (db.defined())
    bias_add_backward(db, dy);
}

}  // namespace ndt::ops
