// LayerNorm over the last dim, and the fused residual + LayerNorm.
//
//   x, y, dy, dx, a, r, sum  [N, C] (leading dims flattened)
//   w, b, dw, db             [C]
//   mean, rstd               [N] (saved for backward; may be undefined in
//                            forward to skip saving)
// dx is assigned; dw, db are accumulated (+=). Statistics are two-pass over
// a row that sits in L1 (stable variance, biased like torch).
#include <omp.h>

#include <cmath>
#include <vector>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

// Normalises one row; the caller has already written `x` (so the fused op
// can produce the residual sum in the same pass).
inline void layernorm_row(
    float* y,
    float* mean_out,
    float* rstd_out,
    const float* x,
    const float* w,
    const float* b,
    int64_t C,
    float eps) {
  const float m = detail::sum_lanes(x, C) / static_cast<float>(C);
  const float var = detail::sq_dev_lanes(x, m, C) / static_cast<float>(C);
  const float s = 1.0f / std::sqrt(var + eps);
  for (int64_t c = 0; c < C; ++c)
    y[c] = (x[c] - m) * s * w[c] + b[c];
  if (mean_out)
    *mean_out = m;
  if (rstd_out)
    *rstd_out = s;
}

void check_shapes(
    const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t C = x.dim(-1);
  NDT_ASSERT(
      w.numel() == C && b.numel() == C,
      "layernorm x ",
      shape_str(x.shape()),
      " w ",
      shape_str(w.shape()),
      " b ",
      shape_str(b.shape()));
  NDT_ASSERT(
      y.numel() == x.numel(),
      "layernorm y ",
      shape_str(y.shape()),
      " x ",
      shape_str(x.shape()));
}

void check_stats(const Tensor& t, int64_t N, const char* what) {
  if (t.defined()) {
    NDT_ASSERT(
        t.numel() == N,
        "layernorm ",
        what,
        " ",
        shape_str(t.shape()),
        " for ",
        N,
        " rows");
  }
}

}  // namespace

void layernorm_forward(
    Tensor& y,
    Tensor& mean,
    Tensor& rstd,
    const Tensor& x,
    const Tensor& w,
    const Tensor& b,
    float eps) {
  check_shapes(y, x, w, b);
  const int64_t C = x.dim(-1), N = x.numel() / C;
  check_stats(mean, N, "mean");
  check_stats(rstd, N, "rstd");
  const float* xp = x.data();
  const float* wp = w.data();
  const float* bp = b.data();
  float* yp = y.data();
  float* mp = mean.defined() ? mean.data() : nullptr;
  float* sp = rstd.defined() ? rstd.data() : nullptr;
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    layernorm_row(
        yp + n * C,
        mp ? mp + n : nullptr,
        sp ? sp + n : nullptr,
        xp + n * C,
        wp,
        bp,
        C,
        eps);
  }
}

void residual_layernorm_forward(
    Tensor& sum,
    Tensor& y,
    Tensor& mean,
    Tensor& rstd,
    const Tensor& a,
    const Tensor& r,
    const Tensor& w,
    const Tensor& b,
    float eps) {
  check_shapes(y, a, w, b);
  NDT_ASSERT(
      r.numel() == a.numel() && sum.numel() == a.numel(),
      "residual_layernorm a ",
      shape_str(a.shape()),
      " r ",
      shape_str(r.shape()),
      " sum ",
      shape_str(sum.shape()));
  const int64_t C = a.dim(-1), N = a.numel() / C;
  check_stats(mean, N, "mean");
  check_stats(rstd, N, "rstd");
  const float* ap = a.data();
  const float* rp = r.data();
  const float* wp = w.data();
  const float* bp = b.data();
  float* sump = sum.data();
  float* yp = y.data();
  float* mp = mean.defined() ? mean.data() : nullptr;
  float* sp = rstd.defined() ? rstd.data() : nullptr;
  // One pass over memory: the row of `sum` written here is still in L1 when
  // layernorm_row reads it back.
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    float* srow = sump + n * C;
    const float* arow = ap + n * C;
    const float* rrow = rp + n * C;
    for (int64_t c = 0; c < C; ++c)
      srow[c] = arow[c] + rrow[c];
    layernorm_row(
        yp + n * C,
        mp ? mp + n : nullptr,
        sp ? sp + n : nullptr,
        srow,
        wp,
        bp,
        C,
        eps);
  }
}

void layernorm_backward(
    Tensor& dx,
    Tensor& dw,
    Tensor& db,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w,
    const Tensor& mean,
    const Tensor& rstd) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  NDT_ASSERT(
      w.numel() == C && dy.numel() == x.numel(),
      "layernorm_backward x ",
      shape_str(x.shape()),
      " w ",
      shape_str(w.shape()),
      " dy ",
      shape_str(dy.shape()));
  NDT_ASSERT(
      mean.numel() == N && rstd.numel() == N,
      "layernorm_backward mean/rstd for ",
      N,
      " rows");
  if (dx.defined()) {
    NDT_ASSERT(dx.numel() == x.numel(), "layernorm dx ", shape_str(dx.shape()));
  }
  if (dw.defined()) {
    NDT_ASSERT(dw.numel() == C, "layernorm dw ", shape_str(dw.shape()));
  }
  if (db.defined()) {
    NDT_ASSERT(db.numel() == C, "layernorm db ", shape_str(db.shape()));
  }
  const float* xp = x.data();
  const float* wp = w.data();
  const float* g = dy.data();
  const float* mp = mean.data();
  const float* sp = rstd.data();
  float* dxp = dx.defined() ? dx.data() : nullptr;
  float* dwp = dw.defined() ? dw.data() : nullptr;
  float* dbp = db.defined() ? db.data() : nullptr;
  const bool params = dwp || dbp;

  // dw, db: each thread sums its contiguous block of rows into its own
  // [2, C] slice of `partials`; the slices are then added in thread order,
  // so the result is fixed for a fixed thread count. The buffer belongs to
  // the calling thread and only grows, so steady state allocates nothing.
  thread_local std::vector<float> partials;
  const int max_threads = omp_get_max_threads();
  if (params && partials.size() < static_cast<size_t>(max_threads * 2 * C)) {
    partials.resize(static_cast<size_t>(max_threads * 2 * C));
  }
  float* part = partials.data();

  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel if (threaded)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t r0 = N * tid / nt, r1 = N * (tid + 1) / nt;
    float* pdw = params ? part + tid * 2 * C : nullptr;
    float* pdb = params ? pdw + C : nullptr;
    if (params) {
      for (int64_t c = 0; c < 2 * C; ++c)
        pdw[c] = 0.0f;
    }
    for (int64_t n = r0; n < r1; ++n) {
      const float* xr = xp + n * C;
      const float* gr = g + n * C;
      const float m = mp[n], s = sp[n];
      if (params) {
        for (int64_t c = 0; c < C; ++c) {
          pdw[c] += gr[c] * ((xr[c] - m) * s);
          pdb[c] += gr[c];
        }
      }
      if (dxp) {
        // dx = s (g w - mean(g w) - xhat mean(g w xhat)).
        float sum_gw[detail::kLanes] = {}, sum_gwx[detail::kLanes] = {};
        int64_t c = 0;
        for (; c + detail::kLanes <= C; c += detail::kLanes) {
          for (int j = 0; j < detail::kLanes; ++j) {
            float gw = gr[c + j] * wp[c + j];
            sum_gw[j] += gw;
            sum_gwx[j] += gw * ((xr[c + j] - m) * s);
          }
        }
        for (int j = 0; c + j < C; ++j) {
          float gw = gr[c + j] * wp[c + j];
          sum_gw[j] += gw;
          sum_gwx[j] += gw * ((xr[c + j] - m) * s);
        }
        float a = 0, bsum = 0;
        for (int j = 0; j < detail::kLanes; ++j) {
          a += sum_gw[j];
          bsum += sum_gwx[j];
        }
        const float mean_gw = a / static_cast<float>(C);
        const float mean_gwx = bsum / static_cast<float>(C);
        float* dxr = dxp + n * C;
        for (int64_t k = 0; k < C; ++k) {
          float xhat = (xr[k] - m) * s;
          dxr[k] = s * (gr[k] * wp[k] - mean_gw - xhat * mean_gwx);
        }
      }
    }
    if (params) {
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t c = 0; c < C; ++c) {
        float sw = 0.0f, sb = 0.0f;
        for (int t = 0; t < nt; ++t) {
          sw += part[t * 2 * C + c];
          sb += part[t * 2 * C + C + c];
        }
        if (dwp)
          dwp[c] += sw;
        if (dbp)
          dbp[c] += sb;
      }
    }
  }
}

}  // namespace ndt::ops
