#include "parallel/ring_self_attention.h"

#include <omp.h>

#include <cmath>
#include <limits>

#include "base/check.h"
#include "ops/ops.h"
#include "parallel/sp_ring.h"

namespace ndt {
namespace {

constexpr int kTagK = 3101;
constexpr int kTagV = 3102;

struct Dims {
  int64_t B, Tl, T, C, NH, hs, N;
};

Dims dims_of(const Tensor& qkv, int NH, const ProcessGroup& sp) {
  NDT_ASSERT(
      qkv.ndim() == 3 && qkv.dim(2) % 3 == 0 && (qkv.dim(2) / 3) % NH == 0,
      "ring self-attention qkv ",
      shape_str(qkv.shape()),
      " heads ",
      NH);
  Dims d{};
  d.B = qkv.dim(0);
  d.Tl = qkv.dim(1);
  d.N = sp.size();
  d.T = d.Tl * d.N;
  d.C = qkv.dim(2) / 3;
  d.NH = NH;
  d.hs = d.C / NH;
  return d;
}

// Head h of sample b of an operand of the per-head products: at p +
// b * batch + h * head, rows ld elements apart.
template <typename P>
struct Heads {
  P* p;
  int64_t batch, head, ld;
  P* at(int64_t b, int64_t h) const {
    return p + b * batch + h * head;
  }
};

// For every (b, h): c = alpha op(a) op(b) + beta c, [M, N] with inner K; in
// parallel (single-threaded GEMMs) with at least as many pairs as
// threads, else in turn.
void per_head_gemm(
    const Dims& d,
    bool trans_a,
    bool trans_b,
    int64_t M,
    int64_t N,
    int64_t K,
    float alpha,
    Heads<const float> a,
    Heads<const float> b,
    float beta,
    Heads<float> c) {
  const int64_t BH = d.B * d.NH;
  const bool per_head = BH >= omp_get_max_threads();
  auto i = [](int64_t x) { return static_cast<int>(x); };
#pragma omp parallel for schedule(static) if (per_head && BH > 1)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t s = bh / d.NH, h = bh % d.NH;
    ops::gemm(
        trans_a,
        trans_b,
        i(M),
        i(N),
        i(K),
        alpha,
        a.at(s, h),
        i(a.ld),
        b.at(s, h),
        i(b.ld),
        beta,
        c.at(s, h),
        i(c.ld));
  }
}

// Operands: my tokens of a [B, T_local, W] tensor, and rank c's column
// block of the score rows [B, NH, T_local, T].
template <typename P>
Heads<P> tokens(P* p, int64_t W, const Dims& d) {
  return {p, d.Tl * W, d.hs, W};
}
template <typename P>
Heads<P> score_block(P* S, int c, const Dims& d) {
  return {S + int64_t{c} * d.Tl, d.NH * d.Tl * d.T, d.Tl * d.T, d.T};
}

// My block of columns [col, col + C) of qkv: the K or V that travels.
Tensor ring_block(const Tensor& qkv, int64_t col, const Dims& d) {
  Tensor t({d.B, d.Tl, d.C}, MemTag::kComm);
  ops::copy_columns(t, 0, qkv, col, d.C);
  return t;
}

}  // namespace

RingSelfAttention::RingSelfAttention(int heads, bool causal, ProcessGroup& sp)
    : heads_(heads), causal_(causal), sp_(sp) {}

// saved: {qkv, probabilities [B, NH, T_local, T]}.
Tensor RingSelfAttention::forward(const Tensor& qkv, Context& ctx) {
  const Dims d = dims_of(qkv, heads_, sp_);
  const int64_t C = d.C, Tl = d.Tl, T = d.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  const auto q = tokens(qkv.data(), 3 * C, d);
  RingPass ring(sp_);
  Tensor S({d.B, d.NH, Tl, T}, MemTag::kActs);
  // Stage 1: K around the ring; S[:, c] = scale q K_c^T.
  ring.circulate(ring_block(qkv, C, d), kTagK, [&](int c, const Tensor& k) {
    per_head_gemm(
        d,
        false,
        true,
        Tl,
        Tl,
        d.hs,
        scale,
        q,
        tokens(k.data(), C, d),
        0.0f,
        score_block(S.data(), c, d));
  });
  // Mask keys after the query (column = global position), then softmax
  // over whole rows: every row keeps its own position visible.
  if (causal_) {
    const int64_t first = sp_.rank() * Tl;
    float* sp = S.data();
    const float kNegInf = -std::numeric_limits<float>::infinity();
    for (int64_t row = 0; row < d.B * d.NH * Tl; ++row) {
      float* srow = sp + row * T;
      for (int64_t j = first + row % Tl + 1; j < T; ++j)
        srow[j] = kNegInf;
    }
  }
  Tensor rows = S.view({d.B * d.NH * Tl, T});
  ops::softmax_forward(rows, rows);
  // Stage 2: V around the ring; out = sum_c P[:, c] V_c.
  Tensor out = Tensor::zeros({d.B, Tl, C}, MemTag::kActs);
  ring.circulate(ring_block(qkv, 2 * C, d), kTagV, [&](int c, const Tensor& v) {
    per_head_gemm(
        d,
        false,
        false,
        Tl,
        d.hs,
        Tl,
        1.0f,
        score_block<const float>(S.data(), c, d),
        tokens(v.data(), C, d),
        1.0f,
        tokens(out.data(), C, d));
  });
  ctx.saved = {qkv, S};
  return out;
}

Tensor RingSelfAttention::backward(const Tensor& dout, Context& ctx) {
  const Tensor& qkv = ctx.saved.at(0);
  const Tensor& P = ctx.saved.at(1);
  const Dims d = dims_of(qkv, heads_, sp_);
  const int64_t C = d.C, Tl = d.Tl, T = d.T, E = d.B * Tl * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  const auto q = tokens(qkv.data(), 3 * C, d);
  const auto g = tokens(dout.data(), C, d);
  RingPass ring(sp_);
  Tensor dS({d.B, d.NH, Tl, T}, MemTag::kActs);
  // My contributions to every chunk's dV and dK, block c for rank c.
  Tensor dv_parts({d.N, d.B, Tl, C}, MemTag::kComm);
  Tensor dk_parts({d.N, d.B, Tl, C}, MemTag::kComm);
  // V around the ring: dP[:, c] = dout V_c^T; meanwhile my part of every
  // dV_c = P[:, c]^T dout.
  ring.circulate(ring_block(qkv, 2 * C, d), kTagV, [&](int c, const Tensor& v) {
    per_head_gemm(
        d,
        false,
        true,
        Tl,
        Tl,
        d.hs,
        1.0f,
        g,
        tokens(v.data(), C, d),
        0.0f,
        score_block(dS.data(), c, d));
    per_head_gemm(
        d,
        true,
        false,
        Tl,
        d.hs,
        Tl,
        1.0f,
        score_block(P.data(), c, d),
        g,
        0.0f,
        tokens(dv_parts.data() + c * E, C, d));
  });
  Tensor dv({d.B, Tl, C}, MemTag::kComm);
  std::unique_ptr<Work> dv_work;
  if (d.N > 1)
    dv_work = sp_.reduce_scatter_async(dv_parts.data(), dv.data(), E);
  else
    dv.copy_(dv_parts.view({d.B, Tl, C}));
  // dS = P (dP - rowsum(dP P)), in place; the scale goes into the GEMMs.
  Tensor rows = dS.view({d.B * d.NH * Tl, T});
  ops::softmax_backward(rows, rows, P.view({d.B * d.NH * Tl, T}));
  // K around the ring: dq += scale dS[:, c] K_c; my part of every dK_c =
  // scale dS[:, c]^T q.
  Tensor dqkv = Tensor::zeros({d.B, Tl, 3 * C}, MemTag::kActs);
  ring.circulate(ring_block(qkv, C, d), kTagK, [&](int c, const Tensor& k) {
    const auto dSc = score_block<const float>(dS.data(), c, d);
    per_head_gemm(
        d,
        false,
        false,
        Tl,
        d.hs,
        Tl,
        scale,
        dSc,
        tokens(k.data(), C, d),
        1.0f,
        tokens(dqkv.data(), 3 * C, d));
    per_head_gemm(
        d,
        true,
        false,
        Tl,
        d.hs,
        Tl,
        scale,
        dSc,
        q,
        0.0f,
        tokens(dk_parts.data() + c * E, C, d));
  });
  Tensor dk({d.B, Tl, C}, MemTag::kComm);
  if (d.N > 1)
    sp_.reduce_scatter(dk_parts.data(), dk.data(), E);
  else
    dk.copy_(dk_parts.view({d.B, Tl, C}));
  if (dv_work)
    dv_work->wait();
  ops::copy_columns(dqkv, C, dk, 0, C);
  ops::copy_columns(dqkv, 2 * C, dv, 0, C);
  ctx.saved.clear();
  return dqkv;
}

}  // namespace ndt
