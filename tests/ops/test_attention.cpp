// Attention: PyTorch fixtures (T = 7, causal and not; causal T = 72), a
// double-precision reference at T = 150 for both thread strategies and
// over every tile shape of the head products (attention_products.h), the
// causal mask, and finite differences for dqkv.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

struct AttentionResult {
  Tensor out, att, dqkv;
};

// Runs forward + backward with every output pre-filled with NaN (they are
// assigned, and masked scratch must never be read).
AttentionResult run_attention(
    const Tensor& qkv, const Tensor& dout, int NH, bool causal) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  AttentionResult r{
      Tensor({B, T, C}), Tensor({B, NH, T, T}), Tensor(qkv.shape())};
  Tensor datt({B, NH, T, T});
  r.out.fill_(NAN);
  r.att.fill_(NAN);
  r.dqkv.fill_(NAN);
  datt.fill_(NAN);
  ops::attention_forward(r.out, r.att, qkv, NH, causal);
  ops::attention_backward(r.dqkv, datt, dout, qkv, r.att, NH, causal);
  return r;
}

// Straightforward loops in double.
AttentionResult attention_reference(
    const Tensor& qkv, const Tensor& dout, int NH, bool causal) {
  const int B = qkv.dim(0), T = qkv.dim(1), C3 = qkv.dim(2), C = C3 / 3;
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(double(hs));
  std::vector<double> out(B * T * C, 0), att(B * NH * T * T, 0),
      dqkv(B * T * C3, 0);
  const float* x = qkv.data();
  const float* g = dout.data();
  auto Q = [&](int b, int t, int h, int d) {
    return double(x[(b * T + t) * C3 + h * hs + d]);
  };
  auto K = [&](int b, int t, int h, int d) {
    return double(x[(b * T + t) * C3 + C + h * hs + d]);
  };
  auto V = [&](int b, int t, int h, int d) {
    return double(x[(b * T + t) * C3 + 2 * C + h * hs + d]);
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      double* P = &att[((b * NH + h) * T) * T];
      for (int i = 0; i < T; ++i) {
        const int len = causal ? i + 1 : T;
        double m = -INFINITY;
        for (int j = 0; j < len; ++j) {
          double s = 0;
          for (int d = 0; d < hs; ++d)
            s += Q(b, i, h, d) * K(b, j, h, d);
          P[i * T + j] = s * scale;
          m = std::max(m, P[i * T + j]);
        }
        double z = 0;
        for (int j = 0; j < len; ++j) {
          P[i * T + j] = std::exp(P[i * T + j] - m);
          z += P[i * T + j];
        }
        for (int j = 0; j < len; ++j)
          P[i * T + j] /= z;
        for (int d = 0; d < hs; ++d) {
          double o = 0;
          for (int j = 0; j < len; ++j)
            o += P[i * T + j] * V(b, j, h, d);
          out[(b * T + i) * C + h * hs + d] = o;
        }
        // Backward for row i.
        std::vector<double> dP(len);
        double dot = 0;
        for (int j = 0; j < len; ++j) {
          double s = 0;
          for (int d = 0; d < hs; ++d) {
            s += double(g[(b * T + i) * C + h * hs + d]) * V(b, j, h, d);
          }
          dP[j] = s;
          dot += s * P[i * T + j];
        }
        for (int j = 0; j < len; ++j) {
          const double dS = P[i * T + j] * (dP[j] - dot) * scale;
          for (int d = 0; d < hs; ++d) {
            dqkv[(b * T + i) * C3 + h * hs + d] += dS * K(b, j, h, d);
            dqkv[(b * T + j) * C3 + C + h * hs + d] += dS * Q(b, i, h, d);
            dqkv[(b * T + j) * C3 + 2 * C + h * hs + d] +=
                P[i * T + j] * g[(b * T + i) * C + h * hs + d];
          }
        }
      }
    }
  }
  auto to_tensor = [](const std::vector<double>& v, Shape s) {
    Tensor t(std::move(s), MemTag::kOther);
    for (size_t i = 0; i < v.size(); ++i) {
      t.data()[i] = static_cast<float>(v[i]);
    }
    return t;
  };
  return {
      to_tensor(out, {B, T, C}),
      to_tensor(att, {B, NH, T, T}),
      to_tensor(dqkv, qkv.shape())};
}

void check_fixture(const char* file) {
  SCOPED_TRACE(file);
  auto f = test::read_fixture(test::source_path(file));
  for (const char* key : {"NH", "causal", "qkv", "dout", "out", "dqkv"}) {
    ASSERT_TRUE(f.count(key)) << key;
  }
  const int NH = static_cast<int>(f["NH"].data()[0]);
  const bool causal = f["causal"].data()[0] != 0.0f;
  AttentionResult r = run_attention(f["qkv"], f["dout"], NH, causal);
  // fp32 against float64 torch, values O(1): rtol 1e-5, atol 1e-6.
  EXPECT_LE(test::close_ratio(r.out, f["out"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(r.dqkv, f["dqkv"], 1e-6, 1e-5), 1.0);
  if (f.count("att")) {
    EXPECT_LE(test::close_ratio(r.att, f["att"], 1e-6, 1e-5), 1.0);
  }
}

TEST(Attention, MatchesPyTorchFixtures) {
  check_fixture("tests/fixtures/attention.txt");
  check_fixture("tests/fixtures/attention_causal.txt");
  check_fixture("tests/fixtures/attention_causal_long.txt");
}

void check_reference(int B, int T, int C, int NH, bool causal) {
  SCOPED_TRACE(
      testing::Message() << "B=" << B << " T=" << T << " C=" << C
                         << " NH=" << NH << " causal=" << causal);
  Tensor qkv = test::randn({B, T, 3 * C}, 1, "qkv");
  Tensor dout = test::randn({B, T, C}, 1, "dout");
  AttentionResult r = run_attention(qkv, dout, NH, causal);
  AttentionResult ref = attention_reference(qkv, dout, NH, causal);
  // Sums over up to T = 150 fp32 terms: rtol 1e-5, atol 1e-6.
  EXPECT_LE(test::close_ratio(r.out, ref.out, 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(r.att, ref.att, 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(r.dqkv, ref.dqkv, 1e-6, 1e-5), 1.0);
  if (causal) {
    const float* a = r.att.data();
    for (int64_t bh = 0; bh < int64_t(B) * NH; ++bh) {
      for (int i = 0; i < T; ++i) {
        for (int j = i + 1; j < T; ++j) {
          ASSERT_EQ(a[(bh * T + i) * T + j], 0.0f) << i << "," << j;
        }
      }
    }
  }
}

TEST(Attention, MatchesReferenceAcrossCausalBlocks) {
  // Many (b, h) pairs: heads run in parallel, single-threaded GEMMs.
  const int before = ops::num_threads();
  ops::set_num_threads(2);
  check_reference(2, 150, 8, 2, true);
  check_reference(2, 150, 8, 2, false);
  // One (b, h) pair with 2 threads: threaded GEMMs and row loops instead.
  check_reference(1, 150, 6, 1, true);
  check_reference(1, 70, 6, 1, false);
  ops::set_num_threads(before);
}

TEST(Attention, MatchesReferenceForEveryTileShape) {
  // Head sizes of 1 to 5 vectors of 16, whole and ragged (12-row tiles up
  // to 32, 6-row above; a second 64-column block at 80), T from 1 to 130
  // (partial row tiles, ragged 16-column and 64-column ends), causal and
  // not; 2 threads over 2 (b, h) pairs and, with 1 pair, over the tiles.
  const int before = ops::num_threads();
  ops::set_num_threads(2);
  for (int hs : {16, 24, 40, 64, 80}) {
    for (int T : {1, 13, 65, 130}) {
      for (bool causal : {false, true}) {
        check_reference(1, T, 2 * hs, 2, causal);
        check_reference(1, T, hs, 1, causal);
      }
    }
  }
  ops::set_num_threads(before);
}

void check_grad(int B, int T, int C, int NH, bool causal, int samples) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " causal=" << causal);
  Tensor qkv = test::randn({B, T, 3 * C}, 2, "qkv");
  Tensor r = test::randn({B, T, C}, 2, "r");
  Tensor out({B, T, C}), att({B, NH, T, T});
  auto loss = [&] {
    ops::attention_forward(out, att, qkv, NH, causal);
    return test::dot(out, r);
  };
  loss();
  Tensor dqkv(qkv.shape()), datt({B, NH, T, T});
  ops::attention_backward(dqkv, datt, r, qkv, att, NH, causal);
  // h = 1e-2 on O(1) inputs, smooth: truncation ~1e-5, fp32 rounding of out
  // ~1e-5. atol 1e-3, rtol 1e-2.
  EXPECT_LE(test::grad_check(qkv, dqkv, loss, 1e-2, 1e-3, 1e-2, samples), 1.0);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  check_grad(2, 5, 8, 2, false, -1);
  check_grad(2, 5, 8, 2, true, -1);
  check_grad(1, 70, 4, 2, true, 150);
}

// The score entries the mask leaves (the GPT's FLOP count): all T^2
// without it; with it, query i sees keys 0..i.
TEST(Attention, ScoresCountWhatTheMaskLeaves) {
  EXPECT_EQ(ops::attention_scores(256, false), 256 * 256);
  EXPECT_EQ(ops::attention_scores(256, true), 256 * 257 / 2);
  EXPECT_EQ(ops::attention_scores(100, true), 5050);
  EXPECT_EQ(ops::attention_scores(1, true), 1);
  EXPECT_EQ(ops::attention_scores(0, true), 0);
}

}  // namespace
}  // namespace ndt
