// Blockwise attention with online softmax on one (query block, key block)
// pair; see ops.h for the shapes. Per (b, h), the key block is walked in
// sub-blocks of `block` keys; each is one [rows, block] score tile:
//
//   forward   S = scale q k^T; m' = max(m, rowmax S); P = exp(S - m');
//             l = l exp(m - m') + rowsum P; o = o exp(m - m') + P v
//   backward  P = exp(scale q k^T - lse); dv += P^T dout; dP = dout v^T;
//             dS = scale P (dP - D); dq += dS k; dk += dS^T q
//
// With causal masking, query rows that see none of a sub-block's keys are
// left out of its GEMMs (rows < i_lo), and a sub-block no query sees ends
// the walk (positions only grow along it). Masked entries of a computed
// tile are zeroed after the exp, so the GEMMs read whole tiles.
//
// (b, h) pairs run in parallel when there are at least as many as threads,
// each with its own tiles (single-threaded GEMMs); otherwise in turn with
// threaded GEMMs. Results do not depend on that choice.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

struct TileDims {
  int64_t B, NH, C, hs, Wq, Tq, Tk;
  float scale;  // 1 / sqrt(hs)
};

// Where head h of sample b starts, for a tile's first query / key row: in
// q (dq), in kv (dkv), in o (dout), in the per-row values (m, l, lse, D).
struct HeadAt {
  int64_t q, kv, o, row;
};

HeadAt head_at(
    const TileDims& d, const AttentionTile& t, int64_t b, int64_t h) {
  return {
      (b * d.Tq + t.q_row) * d.Wq + h * d.hs,
      (b * d.Tk + t.k_row) * 2 * d.C + h * d.hs,
      (b * d.Tq + t.q_row) * d.C + h * d.hs,
      (b * d.NH + h) * d.Tq + t.q_row};
}

TileDims tile_dims(
    const Tensor& q,
    const Tensor& kv,
    const Tensor& rows,
    const AttentionTile& t,
    int block) {
  NDT_ASSERT(
      q.ndim() == 3 && kv.ndim() == 3 && rows.ndim() == 3,
      "attention tile q ",
      shape_str(q.shape()),
      " kv ",
      shape_str(kv.shape()),
      " rows ",
      shape_str(rows.shape()));
  TileDims d{};
  d.B = q.dim(0);
  d.NH = rows.dim(1);
  d.Wq = q.dim(2);
  d.Tq = q.dim(1);
  d.Tk = kv.dim(1);
  d.C = kv.dim(2) / 2;
  NDT_ASSERT(
      kv.dim(0) == d.B && rows.dim(0) == d.B && rows.dim(2) == d.Tq &&
          kv.dim(2) == 2 * d.C && d.Wq >= d.C && d.NH > 0 && d.C % d.NH == 0,
      "attention tile q ",
      shape_str(q.shape()),
      " kv ",
      shape_str(kv.shape()),
      " rows ",
      shape_str(rows.shape()));
  d.hs = d.C / d.NH;
  d.scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  NDT_ASSERT(block > 0, "attention tile block ", block);
  NDT_ASSERT(
      t.q_row >= 0 && t.q_len >= 0 && t.q_row + t.q_len <= d.Tq &&
          t.k_row >= 0 && t.k_len >= 0 && t.k_row + t.k_len <= d.Tk,
      "attention tile rows [",
      t.q_row,
      ", +",
      t.q_len,
      ") x [",
      t.k_row,
      ", +",
      t.k_len,
      ") outside ",
      d.Tq,
      " x ",
      d.Tk);
  return d;
}

// The key sub-block [j0, j0 + bw) of a tile and the query rows that see
// any of it: [i_lo, q_len). Visible keys of query row i: the first
// visible(i) of the sub-block.
struct SubBlock {
  int64_t j0, bw, i_lo;
};

// False when no query of the tile sees key j0 or any later one.
bool sub_block(
    const AttentionTile& t, bool causal, int block, int64_t j0, SubBlock& s) {
  s.j0 = j0;
  s.bw = std::min<int64_t>(block, t.k_len - j0);
  s.i_lo = causal ? std::max<int64_t>(0, t.k_pos + j0 - t.q_pos) : 0;
  return s.i_lo < t.q_len;
}

inline int64_t visible(
    const AttentionTile& t, bool causal, const SubBlock& s, int64_t i) {
  return causal ? std::min(s.bw, t.q_pos + i - (t.k_pos + s.j0) + 1) : s.bw;
}

// Runs body(b, h, tiles) for every (b, h), each thread with `ntiles`
// scratch tiles of [q_len, block]; returns the summed FLOPs.
template <typename Body>
int64_t for_each_head(
    const TileDims& d, int64_t q_len, int block, int ntiles, Body&& body) {
  const int64_t BH = d.B * d.NH;
  const bool per_head = BH >= omp_get_max_threads();
  int64_t flops = 0;
#pragma omp parallel if (per_head && BH > 1) reduction(+ : flops)
  {
    Tensor tiles({ntiles, std::max<int64_t>(q_len, 1), block}, MemTag::kActs);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; ++bh)
      flops += body(bh / d.NH, bh % d.NH, tiles.data());
  }
  return flops;
}

// Walks the key sub-blocks of a tile for one head (qh, kh: its first query
// and key rows): for each one some query sees, the scores S = scale q k^T
// of rows [i_lo, q_len) into tile (ld block), then f(sub-block, rows - i_lo,
// its width).
template <typename F>
void for_each_score_tile(
    const TileDims& d,
    const AttentionTile& t,
    bool causal,
    int block,
    const float* qh,
    const float* kh,
    float* tile,
    F&& f) {
  const int64_t ldkv = 2 * d.C;
  SubBlock s{};
  for (int64_t j0 = 0; j0 < t.k_len && sub_block(t, causal, block, j0, s);
       j0 += block) {
    const int rows = static_cast<int>(t.q_len - s.i_lo);
    const int bw = static_cast<int>(s.bw);
    gemm(
        false,
        true,
        rows,
        bw,
        static_cast<int>(d.hs),
        d.scale,
        qh + s.i_lo * d.Wq,
        static_cast<int>(d.Wq),
        kh + j0 * ldkv,
        static_cast<int>(ldkv),
        0.0f,
        tile,
        block);
    f(s, rows, bw);
  }
}

}  // namespace

int64_t attention_tile_forward(
    Tensor& o,
    Tensor& m,
    Tensor& l,
    const Tensor& q,
    const Tensor& kv,
    const AttentionTile& t,
    bool causal,
    int block) {
  const TileDims d = tile_dims(q, kv, m, t, block);
  NDT_ASSERT(
      o.numel() == d.B * d.Tq * d.C && l.numel() == m.numel(),
      "attention tile o ",
      shape_str(o.shape()),
      " m ",
      shape_str(m.shape()),
      " l ",
      shape_str(l.shape()));
  if (t.q_len == 0 || t.k_len == 0)
    return 0;
  const int64_t C = d.C, hs = d.hs, C2 = 2 * d.C;
  const float* qp = q.data();
  const float* kvp = kv.data();
  float* op = o.data();
  float* mp = m.data();
  float* lp = l.data();
  return for_each_head(
      d, t.q_len, block, 1, [&](int64_t b, int64_t h, float* S) {
        const HeadAt at = head_at(d, t, b, h);
        const float* qh = qp + at.q;
        const float* kh = kvp + at.kv;
        const float* vh = kh + C;
        float* oh = op + at.o;
        float* mh = mp + at.row;
        float* lh = lp + at.row;
        const int iC = static_cast<int>(C), iC2 = static_cast<int>(C2),
                  ihs = static_cast<int>(hs);
        int64_t flops = 0;
        for_each_score_tile(
            d,
            t,
            causal,
            block,
            qh,
            kh,
            S,
            [&](const SubBlock& s, int rows, int bw) {
              const int64_t j0 = s.j0;
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t i = s.i_lo + r;
                float* row = S + r * block;
                const int64_t vis = visible(t, causal, s, i);
                const float m_new =
                    std::max(mh[i], detail::max_lanes(row, vis));
                const float alpha =
                    std::exp(mh[i] - m_new);  // 0 on the first tile
                const float sum = detail::exp_sub_sum(row, row, m_new, vis);
                for (int64_t j = vis; j < s.bw; ++j)
                  row[j] = 0.0f;
                lh[i] = lh[i] * alpha + sum;
                mh[i] = m_new;
                if (alpha != 1.0f) {
                  float* orow = oh + i * C;
                  for (int64_t c = 0; c < hs; ++c)
                    orow[c] *= alpha;
                }
              }
              gemm(
                  false,
                  false,
                  rows,
                  ihs,
                  bw,
                  1.0f,
                  S,
                  block,
                  vh + j0 * C2,
                  iC2,
                  1.0f,
                  oh + s.i_lo * C,
                  iC);
              flops += 4 * int64_t{rows} * s.bw * hs;
            });
        return flops;
      });
}

void attention_tile_finish(Tensor& o, Tensor& m, const Tensor& l) {
  NDT_ASSERT(
      o.ndim() == 3 && m.ndim() == 3 && l.numel() == m.numel() &&
          m.dim(0) == o.dim(0) && m.dim(2) == o.dim(1) &&
          o.dim(2) % m.dim(1) == 0,
      "attention tile finish o ",
      shape_str(o.shape()),
      " m ",
      shape_str(m.shape()));
  const int64_t B = o.dim(0), T = o.dim(1), C = o.dim(2), NH = m.dim(1);
  const int64_t hs = C / NH;
  float* op = o.data();
  float* mp = m.data();
  const float* lp = l.data();
  int64_t empty_rows = 0;
  for (int64_t i = 0; i < l.numel(); ++i)
    empty_rows += lp[i] > 0.0f ? 0 : 1;
  NDT_ASSERT(empty_rows == 0, empty_rows, " attention rows met no visible key");
  const bool threaded = o.numel() >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    for (int64_t i = 0; i < T; ++i) {
      const float li = lp[bh * T + i];
      const float inv = 1.0f / li;
      float* orow = op + (b * T + i) * C + h * hs;
      for (int64_t c = 0; c < hs; ++c)
        orow[c] *= inv;
      mp[bh * T + i] += std::log(li);
    }
  }
}

void attention_tile_row_dot(Tensor& D, const Tensor& dout, const Tensor& o) {
  NDT_ASSERT(
      D.ndim() == 3 && o.ndim() == 3 && dout.numel() == o.numel() &&
          D.dim(0) == o.dim(0) && D.dim(2) == o.dim(1) &&
          o.dim(2) % D.dim(1) == 0,
      "attention row dot D ",
      shape_str(D.shape()),
      " o ",
      shape_str(o.shape()));
  const int64_t B = o.dim(0), T = o.dim(1), C = o.dim(2), NH = D.dim(1);
  const int64_t hs = C / NH;
  const float* op = o.data();
  const float* gp = dout.data();
  float* Dp = D.data();
  const bool threaded = o.numel() >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t at = (b * T + i) * C + h * hs;
      Dp[bh * T + i] = detail::dot_lanes(gp + at, op + at, hs);
    }
  }
}

int64_t attention_tile_backward(
    Tensor& dq,
    Tensor& dkv,
    const Tensor& q,
    const Tensor& kv,
    const Tensor& dout,
    const Tensor& lse,
    const Tensor& D,
    const AttentionTile& t,
    bool causal,
    int block) {
  const TileDims d = tile_dims(q, kv, lse, t, block);
  NDT_ASSERT(
      dq.shape() == q.shape() && dkv.shape() == kv.shape() &&
          dout.numel() == d.B * d.Tq * d.C && D.numel() == lse.numel(),
      "attention tile backward dq ",
      shape_str(dq.shape()),
      " dkv ",
      shape_str(dkv.shape()),
      " dout ",
      shape_str(dout.shape()));
  if (t.q_len == 0 || t.k_len == 0)
    return 0;
  const float scale = d.scale;
  const int64_t C = d.C, hs = d.hs, Wq = d.Wq, C2 = 2 * d.C;
  const float* qp = q.data();
  const float* kvp = kv.data();
  const float* gp = dout.data();
  const float* lsep = lse.data();
  const float* Dp = D.data();
  float* dqp = dq.data();
  float* dkvp = dkv.data();
  const int64_t tile = std::max<int64_t>(t.q_len, 1) * block;
  return for_each_head(
      d, t.q_len, block, 2, [&](int64_t b, int64_t h, float* tiles) {
        float* P = tiles;
        float* dS = tiles + tile;
        const HeadAt at = head_at(d, t, b, h);
        const float* qh = qp + at.q;
        const float* kh = kvp + at.kv;
        const float* vh = kh + C;
        float* dqh = dqp + at.q;
        float* dkh = dkvp + at.kv;
        float* dvh = dkh + C;
        const float* gh = gp + at.o;
        const float* lh = lsep + at.row;
        const float* Dh = Dp + at.row;
        const int iWq = static_cast<int>(Wq), iC = static_cast<int>(C),
                  iC2 = static_cast<int>(C2), ihs = static_cast<int>(hs);
        int64_t flops = 0;
        for_each_score_tile(
            d,
            t,
            causal,
            block,
            qh,
            kh,
            P,
            [&](const SubBlock& s, int rows, int bw) {
              const int64_t j0 = s.j0;
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t i = s.i_lo + r;
                float* row = P + r * block;
                const int64_t vis = visible(t, causal, s, i);
                detail::exp_sub_sum(row, row, lh[i], vis);
                for (int64_t j = vis; j < s.bw; ++j)
                  row[j] = 0.0f;
              }
              // dv[j0:] += P^T dout[i_lo:].
              gemm(
                  true,
                  false,
                  bw,
                  ihs,
                  rows,
                  1.0f,
                  P,
                  block,
                  gh + s.i_lo * C,
                  iC,
                  1.0f,
                  dvh + j0 * C2,
                  iC2);
              // dP = dout v^T, then dS = scale P (dP - D) in place.
              gemm(
                  false,
                  true,
                  rows,
                  bw,
                  ihs,
                  1.0f,
                  gh + s.i_lo * C,
                  iC,
                  vh + j0 * C2,
                  iC2,
                  0.0f,
                  dS,
                  block);
              for (int64_t r = 0; r < rows; ++r) {
                const float* prow = P + r * block;
                float* drow = dS + r * block;
                const float Di = Dh[s.i_lo + r];
                for (int64_t j = 0; j < s.bw; ++j)
                  drow[j] = scale * prow[j] * (drow[j] - Di);
              }
              gemm(
                  false,
                  false,
                  rows,
                  ihs,
                  bw,
                  1.0f,
                  dS,
                  block,
                  kh + j0 * C2,
                  iC2,
                  1.0f,
                  dqh + s.i_lo * Wq,
                  iWq);
              gemm(
                  true,
                  false,
                  bw,
                  ihs,
                  rows,
                  1.0f,
                  dS,
                  block,
                  qh + s.i_lo * Wq,
                  iWq,
                  1.0f,
                  dkh + j0 * C2,
                  iC2);
              flops += 10 * int64_t{rows} * s.bw * hs;
            });
        return flops;
      });
}

void copy_columns(
    Tensor& dst,
    int64_t dst_col,
    const Tensor& src,
    int64_t src_col,
    int64_t width) {
  const int64_t Wd = dst.ndim() > 0 ? dst.dim(-1) : 0;
  const int64_t Ws = src.ndim() > 0 ? src.dim(-1) : 0;
  const int64_t R = Wd > 0 ? dst.numel() / Wd : 0;
  NDT_ASSERT(
      width >= 0 && dst_col >= 0 && src_col >= 0 && dst_col + width <= Wd &&
          src_col + width <= Ws && Ws > 0 && src.numel() / Ws == R,
      "copy_columns dst ",
      shape_str(dst.shape()),
      " [",
      dst_col,
      ", +",
      width,
      ") src ",
      shape_str(src.shape()),
      " [",
      src_col,
      ", +",
      width,
      ")");
  float* dp = dst.data() + dst_col;
  const float* sp = src.data() + src_col;
  const bool threaded = R * width >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(dp + r * Wd, sp + r * Ws, sizeof(float) * width);
}

}  // namespace ndt::ops
