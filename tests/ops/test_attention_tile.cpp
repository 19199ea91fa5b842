// Blockwise attention with online softmax (ops::attention_tile_*) against
// the serial attention kernel (itself checked against PyTorch fixtures and
// finite differences in test_attention.cpp): one sequence cut into query
// and key blocks of uneven length, the key blocks visited in a scrambled
// order (online softmax does not depend on it), tiles of 3 keys (partial
// tiles everywhere), causal and not, and q given alone ([B, T, C]) or
// inside the packed qkv ([B, T, 3C]).
//
// Tolerance: max |a - b| / max |b| <= 1e-5 per tensor: the same sums in
// another order (per-tile rescaling, per-tile GEMM accumulation). A
// skipped tile, wrong mask or position is O(1). The FLOP counts are exact:
// the GEMMs of the visible tiles, counted by hand for one causal case.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;
using test::rel_diff;

constexpr int64_t kB = 2, kT = 17, kNH = 3, kHs = 4, kC = kNH * kHs;
constexpr int kBlock = 3;

struct Run {
  int64_t q_row, q_len;
};

// Columns [col, col + width) of x [.., W].
Tensor columns(const Tensor& x, int64_t col, int64_t width) {
  Shape s = x.shape();
  s.back() = width;
  Tensor out(s, MemTag::kOther);
  ops::copy_columns(out, 0, x, col, width);
  return out;
}

void check_tiles(bool causal, bool packed_q) {
  SCOPED_TRACE(
      std::string(causal ? "causal" : "full") +
      (packed_q ? " packed q" : " separate q"));
  const Tensor qkv = randn({kB, kT, 3 * kC}, 1, "qkv");
  const Tensor dout = randn({kB, kT, kC}, 2, "dout");
  Tensor out_ser({kB, kT, kC}), att({kB, kNH, kT, kT});
  Tensor dqkv_ser(qkv.shape()), datt(att.shape());
  ops::attention_forward(out_ser, att, qkv, kNH, causal);
  ops::attention_backward(dqkv_ser, datt, dout, qkv, att, kNH, causal);

  const Tensor q = packed_q ? qkv : columns(qkv, 0, kC);
  const Tensor kv = columns(qkv, kC, 2 * kC);
  // Query blocks [0, 7), [7, 17); key blocks visited 2, 0, 1.
  const std::vector<Run> qb = {{0, 7}, {7, 10}};
  const std::vector<Run> kb = {{11, 6}, {0, 5}, {5, 6}};
  auto tile_of = [](const Run& qr, const Run& kr) {
    ops::AttentionTile t;
    t.q_row = qr.q_row;
    t.q_len = qr.q_len;
    t.q_pos = qr.q_row;
    t.k_row = kr.q_row;
    t.k_len = kr.q_len;
    t.k_pos = kr.q_row;
    return t;
  };
  Tensor out = Tensor::zeros({kB, kT, kC});
  Tensor m({kB, kNH, kT}), l = Tensor::zeros({kB, kNH, kT});
  m.fill_(-INFINITY);
  for (const Run& kr : kb) {
    for (const Run& qr : qb)
      ops::attention_tile_forward(
          out, m, l, q, kv, tile_of(qr, kr), causal, kBlock);
  }
  ops::attention_tile_finish(out, m, l);
  EXPECT_LE(rel_diff(out, out_ser), 1e-5);

  Tensor D({kB, kNH, kT});
  ops::attention_tile_row_dot(D, dout, out);
  Tensor dq = Tensor::zeros(q.shape()), dkv = Tensor::zeros(kv.shape());
  for (const Run& kr : kb) {
    for (const Run& qr : qb)
      ops::attention_tile_backward(
          dq, dkv, q, kv, dout, m, D, tile_of(qr, kr), causal, kBlock);
  }
  EXPECT_LE(rel_diff(columns(dq, 0, kC), columns(dqkv_ser, 0, kC)), 1e-5);
  EXPECT_LE(rel_diff(columns(dkv, 0, kC), columns(dqkv_ser, kC, kC)), 1e-5);
  EXPECT_LE(
      rel_diff(columns(dkv, kC, kC), columns(dqkv_ser, 2 * kC, kC)), 1e-5);
}

TEST(AttentionTile, MatchesSerialAttention) {
  for (bool causal : {false, true}) {
    for (bool packed : {false, true})
      check_tiles(causal, packed);
  }
}

// Causal tile of 4 queries at positions 10..13 against 7 keys at 8..14,
// tiles of 3 keys: keys 8..10 seen by all 4 rows, 11..13 by rows 1..3
// (query 11 onward), key 14 by none (skipped). Forward GEMMs: 2 (q k^T,
// P v) x 2 x rows x keys x hs; backward 5 of them.
TEST(AttentionTile, CountsFlopsOfVisibleTiles) {
  const int64_t B = 1, NH = 1, C = 4, T = 16;
  const Tensor q = randn({B, T, C}, 3, "q");
  const Tensor kv = randn({B, T, 2 * C}, 4, "kv");
  const Tensor dout = randn({B, T, C}, 5, "dout");
  ops::AttentionTile t;
  t.q_row = 10;
  t.q_len = 4;
  t.q_pos = 10;
  t.k_row = 0;
  t.k_len = 7;
  t.k_pos = 8;
  // Rows 0..9 of the query tensor meet keys 0..9 first so that every row
  // has a visible key before finish.
  ops::AttentionTile first;
  first.q_len = T;
  first.k_len = T;
  Tensor out = Tensor::zeros({B, T, C}), l = Tensor::zeros({B, NH, T});
  Tensor m({B, NH, T});
  m.fill_(-INFINITY);
  ops::attention_tile_forward(out, m, l, q, kv, first, true, 3);
  const int64_t visible = 4 * 3 + 3 * 3;  // rows x keys of the two tiles
  EXPECT_EQ(
      ops::attention_tile_forward(out, m, l, q, kv, t, true, 3),
      4 * visible * C);
  ops::attention_tile_finish(out, m, l);
  Tensor D({B, NH, T});
  ops::attention_tile_row_dot(D, dout, out);
  Tensor dq = Tensor::zeros(q.shape()), dkv = Tensor::zeros(kv.shape());
  EXPECT_EQ(
      ops::attention_tile_backward(dq, dkv, q, kv, dout, m, D, t, true, 3),
      10 * visible * C);
}

}  // namespace
}  // namespace ndt
