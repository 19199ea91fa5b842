// Synthetic batches: deterministic in (seed, step), in range, and with the
// stated distributions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "data/synthetic.h"

namespace ndt {
namespace {

TEST(Synthetic, ImagesAreDeterministicNormalAndLabelsInRange) {
  const int64_t B = 64;
  Tensor x({B, 3, 32, 32}, MemTag::kData), y({B}, MemTag::kData, DType::kI32);
  Tensor x2({B, 3, 32, 32}, MemTag::kData);
  Tensor y2({B}, MemTag::kData, DType::kI32);
  synthetic_images(1, 7, B, 3, 32, 32, 10, x, y);
  synthetic_images(1, 7, B, 3, 32, 32, 10, x2, y2);
  EXPECT_EQ(0, std::memcmp(x.data(), x2.data(), x.numel() * 4));
  EXPECT_EQ(0, std::memcmp(y.data_i32(), y2.data_i32(), B * 4));
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    sum += x.data()[i];
    sum_sq += double(x.data()[i]) * x.data()[i];
  }
  // 196608 draws: standard error of the mean ~ 0.0023.
  const double mean = sum / x.numel();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_sq / x.numel() - mean * mean), 1.0, 0.01);
  std::set<int32_t> classes;
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_GE(y.data_i32()[b], 0);
    EXPECT_LT(y.data_i32()[b], 10);
    classes.insert(y.data_i32()[b]);
  }
  EXPECT_GE(classes.size(), 8u);
  synthetic_images(1, 8, B, 3, 32, 32, 10, x2, y2);
  EXPECT_NE(0, std::memcmp(x.data(), x2.data(), x.numel() * 4));
}

TEST(Synthetic, TokensAreShiftedSequencesInRange) {
  const int64_t B = 4, T = 50;
  const int V = 7;
  Tensor tok({B, T}, MemTag::kData, DType::kI32);
  Tensor tgt({B, T}, MemTag::kData, DType::kI32);
  Tensor tok2({B, T}, MemTag::kData, DType::kI32);
  Tensor tgt2({B, T}, MemTag::kData, DType::kI32);
  synthetic_tokens(3, 0, B, T, V, tok, tgt);
  synthetic_tokens(3, 0, B, T, V, tok2, tgt2);
  EXPECT_EQ(0, std::memcmp(tok.data_i32(), tok2.data_i32(), B * T * 4));
  EXPECT_EQ(0, std::memcmp(tgt.data_i32(), tgt2.data_i32(), B * T * 4));
  std::set<int32_t> seen;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t v = tok.data_i32()[b * T + t];
      EXPECT_GE(v, 0);
      EXPECT_LT(v, V);
      seen.insert(v);
      EXPECT_GE(tgt.data_i32()[b * T + t], 0);
      EXPECT_LT(tgt.data_i32()[b * T + t], V);
      if (t + 1 < T) {
        EXPECT_EQ(tgt.data_i32()[b * T + t], tok.data_i32()[b * T + t + 1]);
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(V));
  synthetic_tokens(4, 0, B, T, V, tok2, tgt2);
  EXPECT_NE(0, std::memcmp(tok.data_i32(), tok2.data_i32(), B * T * 4));
}

}  // namespace
}  // namespace ndt
