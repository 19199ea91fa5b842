// Scaled dot-product attention on the fused qkv layout.
//
//   qkv, dqkv  [B, T, 3C]: q | k | v, head h at columns h*hs .. (h+1)*hs of
//              each third, hs = C / NH
//   out, dout  [B, T, C], head h at columns h*hs ..
//   att        [B, NH, T, T] softmax probabilities, masked entries 0
//   datt       [B, NH, T, T] scratch for backward
// Forward: att = softmax(q k^T / sqrt(hs) + mask), out = att v.
// Backward (dqkv assigned): datt = dout v^T, ds = att * (datt - rowsum(datt
// att)) / sqrt(hs), dq = ds k, dk = ds^T q, dv = att^T dout.
//
// Each (b, h) is a handful of small products on strided views of qkv
// (lda = 3C; attention_products.h), so nothing is copied per head but k's
// or v's transpose for the scores, and two row passes (the softmax and its
// gradient; attention_rows.h). While one head computes, the next head's
// rows are prefetched. With at least as many (b, h) pairs as threads they
// run in parallel, each on one thread; otherwise heads run in turn with
// their products and row loops split over the threads. Causal attention
// computes the scores up to the diagonal (and a few past it), so about
// half the products are skipped.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "ops/cpu/attention_products.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/parallel_for.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

struct Dims {
  int B, T, C, NH, hs, C3;
};

Dims attention_dims(const Tensor& qkv, int NH) {
  NDT_ASSERT(
      qkv.ndim() == 3 && qkv.dim(2) % 3 == 0,
      "attention qkv ",
      shape_str(qkv.shape()),
      " is not [B, T, 3C]");
  Dims d{};
  d.B = static_cast<int>(qkv.dim(0));
  d.T = static_cast<int>(qkv.dim(1));
  d.C3 = static_cast<int>(qkv.dim(2));
  d.C = d.C3 / 3;
  d.NH = NH;
  NDT_ASSERT(
      NH > 0 && d.C % NH == 0,
      "attention C ",
      d.C,
      " not divisible",
      " by NH ",
      NH);
  d.hs = d.C / NH;
  return d;
}

}  // namespace

int64_t attention_scores(int T, bool causal) {
  NDT_ASSERT(T >= 0, "attention tokens ", T);
  return causal ? int64_t{T} * (T + 1) / 2 : int64_t{T} * T;
}

namespace {

// Each head function returns the FLOPs of its products.
int64_t attention_head_forward(
    float* o,
    float* A,
    const float* q,
    const Dims& d,
    bool causal,
    bool threaded_rows) {
  const int T = d.T, C3 = d.C3, hs = d.hs;
  const float* k = q + d.C;
  const float* v = q + 2 * d.C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t flops = detail::head_scores(
      T, T, hs, scale, q, C3, k, C3, A, T, causal, threaded_rows);
  detail::parallel_for(threaded_rows, T, [&](int64_t i) {
    detail::softmax_row(A + i * T, causal ? static_cast<int>(i) + 1 : T, T);
  });
  return flops +
         detail::head_weighted(
             false, T, hs, T, A, T, v, C3, o, d.C, causal, threaded_rows);
}

int64_t attention_head_backward(
    float* dq,
    float* D,
    const float* dO,
    const float* q,
    const float* A,
    const Dims& d,
    bool causal,
    bool threaded_rows) {
  const int T = d.T, C3 = d.C3, C = d.C, hs = d.hs;
  const float* k = q + C;
  const float* v = q + 2 * C;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // D = dO v^T on the keys each query sees.
  int64_t flops = detail::head_scores(
      T, T, hs, 1.0f, dO, C, v, C3, D, T, causal, threaded_rows);
  // D <- scale * A * (D - rowsum(D A)); the masked entries the products
  // below read (up to kCausalReach past the diagonal) are zeroed.
  detail::parallel_for(threaded_rows, T, [&](int64_t i) {
    const int len = causal ? static_cast<int>(i) + 1 : T;
    const int end =
        static_cast<int>(std::min<int64_t>(T, i + detail::kCausalReach));
    detail::softmax_grad_row(D + i * T, A + i * T, len, end, T, scale);
  });
  // dq = D k; dk = D^T q and dv = A^T dO, key j summed over the queries
  // that see it (j onwards, causal).
  flops += detail::head_weighted(
      false, T, hs, T, D, T, k, C3, dq, C3, causal, threaded_rows);
  flops += detail::head_weighted(
      true, T, hs, T, D, T, q, C3, dk, C3, causal, threaded_rows);
  return flops +
         detail::head_weighted(
             true, T, hs, T, A, T, dO, C, dv, C3, causal, threaded_rows);
}

// Asks for the lines of `rows` rows of `cols` floats, `ld` apart, to be
// brought into L2: the next head's operands, fetched while this head
// computes (its rows inside qkv are far apart and would otherwise come
// from memory one short stream at a time when the head starts).
void prefetch_rows(const float* p, int rows, int cols, int64_t ld) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; c += 16)
      __builtin_prefetch(p + r * ld + c, 0, 2);
}

// q, k and v of head bh = b * NH + h.
void prefetch_head(const float* qkv, const Dims& d, int bh) {
  const float* q =
      qkv + (static_cast<int64_t>(bh / d.NH) * d.T * d.C3 + bh % d.NH * d.hs);
  for (int part = 0; part < 3; ++part)
    prefetch_rows(q + part * d.C, d.T, d.hs, d.C3);
}

}  // namespace

void attention_forward(
    Tensor& out, Tensor& att, const Tensor& qkv, int NH, bool causal) {
  const Dims d = attention_dims(qkv, NH);
  const int64_t TT = static_cast<int64_t>(d.T) * d.T;
  NDT_ASSERT(
      out.numel() == static_cast<int64_t>(d.B) * d.T * d.C,
      "attention out ",
      shape_str(out.shape()),
      " for qkv ",
      shape_str(qkv.shape()));
  NDT_ASSERT(
      att.numel() == static_cast<int64_t>(d.B) * d.NH * TT,
      "attention att ",
      shape_str(att.shape()),
      " for qkv ",
      shape_str(qkv.shape()),
      " NH ",
      NH);
  const float* qkvp = qkv.data();
  float* outp = out.data();
  float* attp = att.data();
  const int BH = d.B * d.NH;
  const bool per_head = BH >= omp_get_max_threads();
  int64_t flops = 0;
#pragma omp parallel for schedule(static) if (per_head && BH > 1) \
    reduction(+ : flops)
  for (int bh = 0; bh < BH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    if (bh + 1 < BH)
      prefetch_head(qkvp, d, bh + 1);
    flops += attention_head_forward(
        outp + (static_cast<int64_t>(b) * d.T * d.C + h * d.hs),
        attp + bh * TT,
        qkvp + (static_cast<int64_t>(b) * d.T * d.C3 + h * d.hs),
        d,
        causal,
        !per_head);
  }
  count_flops(flops);
}

void attention_backward(
    Tensor& dqkv,
    Tensor& datt,
    const Tensor& dout,
    const Tensor& qkv,
    const Tensor& att,
    int NH,
    bool causal) {
  const Dims d = attention_dims(qkv, NH);
  const int64_t TT = static_cast<int64_t>(d.T) * d.T;
  NDT_ASSERT(
      dqkv.numel() == qkv.numel(),
      "attention dqkv ",
      shape_str(dqkv.shape()),
      " qkv ",
      shape_str(qkv.shape()));
  NDT_ASSERT(
      dout.numel() == static_cast<int64_t>(d.B) * d.T * d.C,
      "attention dout ",
      shape_str(dout.shape()));
  NDT_ASSERT(
      att.numel() == static_cast<int64_t>(d.B) * d.NH * TT &&
          datt.numel() == att.numel(),
      "attention att ",
      shape_str(att.shape()),
      " datt ",
      shape_str(datt.shape()),
      " for qkv ",
      shape_str(qkv.shape()),
      " NH ",
      NH);
  const float* qkvp = qkv.data();
  const float* doutp = dout.data();
  const float* attp = att.data();
  float* dqkvp = dqkv.data();
  float* dattp = datt.data();
  const int BH = d.B * d.NH;
  const bool per_head = BH >= omp_get_max_threads();
  int64_t flops = 0;
#pragma omp parallel for schedule(static) if (per_head && BH > 1) \
    reduction(+ : flops)
  for (int bh = 0; bh < BH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    const int64_t qoff = static_cast<int64_t>(b) * d.T * d.C3 + h * d.hs;
    if (bh + 1 < BH) {
      const int nb = (bh + 1) / d.NH, nh = (bh + 1) % d.NH;
      prefetch_head(qkvp, d, bh + 1);
      prefetch_rows(
          doutp + (static_cast<int64_t>(nb) * d.T * d.C + nh * d.hs),
          d.T,
          d.hs,
          d.C);
      prefetch_rows(attp + (bh + 1) * TT, 1, static_cast<int>(TT), 0);
    }
    flops += attention_head_backward(
        dqkvp + qoff,
        dattp + bh * TT,
        doutp + (static_cast<int64_t>(b) * d.T * d.C + h * d.hs),
        qkvp + qoff,
        attp + bh * TT,
        d,
        causal,
        !per_head);
  }
  count_flops(flops);
}

}  // namespace ndt::ops
