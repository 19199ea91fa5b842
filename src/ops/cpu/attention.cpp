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
// Each (b, h) is a handful of GEMMs on strided views of qkv (lda = 3C), so
// nothing is copied per head. With at least as many (b, h) pairs as threads
// they run in parallel, each GEMM single-threaded (OpenBLAS's OpenMP build
// does that inside a parallel region); otherwise heads run in turn with
// threaded GEMMs and row loops. Causal attention works in query blocks of
// kBlock rows that only touch keys up to the block's end, so roughly half
// the products are skipped.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

constexpr int kBlock = 64;

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

// Keys visible to query block [i0, i1).
inline int key_end(int i1, int T, bool causal) {
  return causal ? i1 : T;
}

}  // namespace

int64_t attention_scores_computed(int T, bool causal) {
  NDT_ASSERT(T >= 0, "attention tokens ", T);
  if (!causal)
    return int64_t{T} * T;
  int64_t scores = 0;
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int i1 = std::min(T, i0 + kBlock);
    scores += int64_t{i1 - i0} * key_end(i1, T, causal);
  }
  return scores;
}

namespace {

void attention_head_forward(
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
  const int blk = causal ? kBlock : T;
  for (int i0 = 0; i0 < T; i0 += blk) {
    const int i1 = i0 + blk < T ? i0 + blk : T;
    gemm(
        false,
        true,
        i1 - i0,
        key_end(i1, T, causal),
        hs,
        scale,
        q + static_cast<int64_t>(i0) * C3,
        C3,
        k,
        C3,
        0.0f,
        A + static_cast<int64_t>(i0) * T,
        T);
  }
#pragma omp parallel for schedule(static) if (threaded_rows)
  for (int i = 0; i < T; ++i) {
    float* row = A + static_cast<int64_t>(i) * T;
    const int len = causal ? i + 1 : T;
    const float m = detail::max_lanes(row, len);
    const float inv = 1.0f / detail::exp_sub_sum(row, row, m, len);
    for (int j = 0; j < len; ++j)
      row[j] *= inv;
    for (int j = len; j < T; ++j)
      row[j] = 0.0f;
  }
  for (int i0 = 0; i0 < T; i0 += blk) {
    const int i1 = i0 + blk < T ? i0 + blk : T;
    gemm(
        false,
        false,
        i1 - i0,
        hs,
        key_end(i1, T, causal),
        1.0f,
        A + static_cast<int64_t>(i0) * T,
        T,
        v,
        C3,
        0.0f,
        o + static_cast<int64_t>(i0) * d.C,
        d.C);
  }
}

void attention_head_backward(
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
  const int blk = causal ? kBlock : T;
  // D = dO v^T on the visible keys of each query block.
  for (int i0 = 0; i0 < T; i0 += blk) {
    const int i1 = i0 + blk < T ? i0 + blk : T;
    gemm(
        false,
        true,
        i1 - i0,
        key_end(i1, T, causal),
        hs,
        1.0f,
        dO + static_cast<int64_t>(i0) * C,
        C,
        v,
        C3,
        0.0f,
        D + static_cast<int64_t>(i0) * T,
        T);
  }
  // D <- scale * A * (D - rowsum(D A)); masked entries inside the computed
  // block are zeroed so the dk GEMM below can read whole blocks.
#pragma omp parallel for schedule(static) if (threaded_rows)
  for (int i = 0; i < T; ++i) {
    float* drow = D + static_cast<int64_t>(i) * T;
    const float* arow = A + static_cast<int64_t>(i) * T;
    const int len = causal ? i + 1 : T;
    int end = T;  // end of the block of keys the GEMMs read for row i
    if (causal && (i / blk + 1) * blk < T)
      end = (i / blk + 1) * blk;
    const float s = detail::dot_lanes(drow, arow, len);
    for (int j = 0; j < len; ++j)
      drow[j] = scale * arow[j] * (drow[j] - s);
    for (int j = len; j < end; ++j)
      drow[j] = 0.0f;
  }
  for (int i0 = 0; i0 < T; i0 += blk) {
    const int i1 = i0 + blk < T ? i0 + blk : T;
    const int64_t r0 = static_cast<int64_t>(i0);
    // dq[i0:i1] = D[i0:i1, :kend] k[:kend].
    gemm(
        false,
        false,
        i1 - i0,
        hs,
        key_end(i1, T, causal),
        1.0f,
        D + r0 * T,
        T,
        k,
        C3,
        0.0f,
        dq + r0 * C3,
        C3);
    // Key block [i0, i1) is seen by queries i0..T-1 only (causal), so
    // dk[i0:i1] = D[i0:, i0:i1]^T q[i0:], dv[i0:i1] = A[i0:, i0:i1]^T dO[i0:].
    const int q0 = causal ? i0 : 0;
    const int64_t qr = static_cast<int64_t>(q0);
    gemm(
        true,
        false,
        i1 - i0,
        hs,
        T - q0,
        1.0f,
        D + qr * T + i0,
        T,
        q + qr * C3,
        C3,
        0.0f,
        dk + r0 * C3,
        C3);
    gemm(
        true,
        false,
        i1 - i0,
        hs,
        T - q0,
        1.0f,
        A + qr * T + i0,
        T,
        dO + qr * C,
        C,
        0.0f,
        dv + r0 * C3,
        C3);
  }
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
#pragma omp parallel for schedule(static) if (per_head && BH > 1)
  for (int bh = 0; bh < BH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    attention_head_forward(
        outp + (static_cast<int64_t>(b) * d.T * d.C + h * d.hs),
        attp + bh * TT,
        qkvp + (static_cast<int64_t>(b) * d.T * d.C3 + h * d.hs),
        d,
        causal,
        !per_head);
  }
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
#pragma omp parallel for schedule(static) if (per_head && BH > 1)
  for (int bh = 0; bh < BH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    const int64_t qoff = static_cast<int64_t>(b) * d.T * d.C3 + h * d.hs;
    attention_head_backward(
        dqkvp + qoff,
        dattp + bh * TT,
        doutp + (static_cast<int64_t>(b) * d.T * d.C + h * d.hs),
        qkvp + qoff,
        attp + bh * TT,
        d,
        causal,
        !per_head);
  }
}

}  // namespace ndt::ops
