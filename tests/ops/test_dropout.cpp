// Dropout: the mask equals rng_uniform(key, i) >= p element for element,
// the keep rate is 1 - p, backward reuses the same mask, y may alias x; a
// column block with a row stride draws the whole tensor's mask on its
// elements (bitwise).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "tensor/rng.h"
#include "test_util.h"

namespace ndt {
namespace {

TEST(Dropout, MaskIsCounterRngAndKeepRateIsOneMinusP) {
  const int64_t n = 100003;  // not a multiple of the 128-value groups
  const float p = 0.1f;
  const uint64_t key = rng_key(7, "dropout/layer0");
  const float scale = 1.0f / (1.0f - p);
  Tensor x = test::randn({n}, 1, "x");
  // Offsets inside a group, and across a 2^32 boundary of the counter.
  for (uint64_t offset :
       {uint64_t(0), uint64_t(77), (uint64_t(1) << 32) - 5000}) {
    Tensor y({n});
    ops::dropout_forward(y, x, p, key, offset);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep =
          rng_uniform(key, offset + static_cast<uint64_t>(i)) >= p;
      kept += keep;
      ASSERT_EQ(y.data()[i], keep ? x.data()[i] * scale : 0.0f)
          << "offset " << offset << " element " << i;
    }
    // Binomial: sd sqrt(p (1 - p) / n) ~ 9.5e-4; allow 5 sd.
    EXPECT_NEAR(double(kept) / n, 1.0 - p, 5e-3);
  }
}

// rng_uniform's layout: in each aligned run of 128 indices, index 32 w + j
// is word w of Philox block (index / 128) * 32 + j, as 24 bits in [0, 1).
TEST(Dropout, UniformUsesEveryWordOfAPhiloxBlock) {
  const uint64_t key = rng_key(9, "drop");
  for (uint64_t q : {uint64_t(0), uint64_t(3), uint64_t(1) << 30}) {
    for (uint64_t w = 0; w < 4; ++w) {
      for (uint64_t j = 0; j < 32; ++j) {
        const auto block = philox4x32(key, q * 32 + j);
        const float want =
            static_cast<float>(block[w] >> 8) * (1.0f / 16777216.0f);
        ASSERT_EQ(rng_uniform(key, q * 128 + w * 32 + j), want)
            << q << " " << w << " " << j;
      }
    }
  }
}

TEST(Dropout, BackwardUsesSameMask) {
  const int64_t n = 5000;
  const float p = 0.3f;
  const uint64_t key = rng_key(1, "drop");
  Tensor x = test::randn({n}, 2, "x");
  Tensor dy = test::randn({n}, 2, "dy");
  Tensor y({n}), dx({n});
  ops::dropout_forward(y, x, p, key);
  ops::dropout_backward(dx, dy, p, key);
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) {
    const bool kept = y.data()[i] != 0.0f;  // x is never exactly 0 here
    ASSERT_EQ(dx.data()[i], kept ? dy.data()[i] * scale : 0.0f) << i;
  }
  // Another key gives another mask.
  Tensor y2({n});
  ops::dropout_forward(y2, x, p, rng_key(2, "drop"));
  EXPECT_GT(test::max_abs_diff(y, y2), 0.0);
}

TEST(Dropout, BackwardMatchesFiniteDifferences) {
  const float p = 0.25f;
  const uint64_t key = rng_key(3, "drop");
  Tensor x = test::randn({4, 9}, 3, "x");
  Tensor r = test::randn({4, 9}, 3, "r");
  Tensor y({4, 9}), dx({4, 9});
  auto loss = [&] {
    ops::dropout_forward(y, x, p, key);
    return test::dot(y, r);
  };
  ops::dropout_backward(dx, r, p, key);
  // Linear for a fixed mask: exact up to fp32 rounding; atol 1e-4, rtol 1e-3.
  EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-4, 1e-3), 1.0);
}

TEST(Dropout, InPlaceAndZeroProbability) {
  const uint64_t key = rng_key(4, "drop");
  Tensor x = test::randn({1000}, 4, "x");
  Tensor y({1000});
  ops::dropout_forward(y, x, 0.5f, key);
  Tensor z = x.clone(MemTag::kOther);
  ops::dropout_forward(z, z, 0.5f, key);  // y aliases x
  EXPECT_EQ(test::max_abs_diff(z, y), 0.0);
  ops::dropout_forward(y, x, 0.0f, key);
  EXPECT_EQ(test::max_abs_diff(y, x), 0.0);  // p = 0 keeps everything
}

// Column block [R, W] at column c0 of a [R, S] tensor whose mask starts
// at `first`: element (r, c) keeps iff rng_uniform(key, first + r S + c0 +
// c) >= p, also where the indices cross a 2^32 boundary.
TEST(Dropout, ColumnBlockWithRowStrideDrawsTheWholeTensorsMask) {
  const float p = 0.2f;
  const float scale = 1.0f / (1.0f - p);
  const uint64_t key = rng_key(5, "drop");
  const int64_t R = 37, S = 45, W = 13;
  for (uint64_t first :
       {uint64_t(0), uint64_t(77), (uint64_t(1) << 32) - 700}) {
    for (int64_t c0 : {0, 5, 32}) {
      Tensor x = test::randn({R, W}, 6, "x");
      Tensor y({R, W}), dx({R, W});
      ops::dropout_forward(y, x, p, key, first + c0, S);
      ops::dropout_backward(dx, x, p, key, first + c0, S);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < W; ++c) {
          const uint64_t g = first + static_cast<uint64_t>(r * S + c0 + c);
          const float xv = x.data()[r * W + c];
          const float want = rng_uniform(key, g) >= p ? xv * scale : 0.0f;
          ASSERT_EQ(y.data()[r * W + c], want)
              << "first " << first << " column " << c0 << " (" << r << ", " << c
              << ")";
          ASSERT_EQ(dx.data()[r * W + c], want);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ndt
