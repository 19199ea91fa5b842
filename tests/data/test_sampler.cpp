// GlobalSampler: one permutation per epoch, a pure function of
// (seed, epoch); any slice of the global stream equals the same part of a
// full read (exact), across epoch boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "data/sampler.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

std::vector<int64_t> read(GlobalSampler& s, int64_t first, int64_t count) {
  std::vector<int64_t> out(count);
  s.indices(first, count, out.data());
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<int64_t>(i))
      return false;
  }
  return true;
}

TEST(Sampler, EachEpochIsAPermutation) {
  const int64_t N = 1000;
  GlobalSampler s(N, 3);
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<int64_t> epoch = read(s, e * N, N);
    EXPECT_TRUE(is_permutation_of_range(epoch)) << "epoch " << e;
    std::vector<int64_t> identity(N);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_NE(epoch, identity) << "epoch " << e << " is not shuffled";
  }
}

TEST(Sampler, SameSeedSameOrderOtherSeedOtherOrder) {
  GlobalSampler a(500, 11), b(500, 11), c(500, 12);
  EXPECT_EQ(read(a, 0, 1500), read(b, 0, 1500));
  EXPECT_NE(read(a, 0, 500), read(c, 0, 500));
}

TEST(Sampler, EpochsHaveDifferentOrders) {
  GlobalSampler s(500, 11);
  std::vector<int64_t> e0 = read(s, 0, 500);
  std::vector<int64_t> e1 = read(s, 500, 500);
  std::vector<int64_t> e2 = read(s, 1000, 500);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  EXPECT_NE(e0, e2);
}

TEST(Sampler, SlicesEqualTheFullReadExactly) {
  const int64_t N = 97;  // prime: batches never align with epochs
  GlobalSampler serial(N, 5);
  const std::vector<int64_t> full = read(serial, 0, 5 * N);
  // Slices in a scrambled order force the cache to switch epochs back and
  // forth; each must match the full read bit for bit.
  GlobalSampler sliced(N, 5);
  const uint64_t key = rng_key(1, "test_slices");
  for (int i = 0; i < 200; ++i) {
    int64_t a = rng_u64(key, 2 * i) % (5 * N);
    int64_t len = rng_u64(key, 2 * i + 1) % (5 * N - a + 1);
    std::vector<int64_t> got = read(sliced, a, len);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), full.begin() + a))
        << "slice [" << a << ", " << a + len << ")";
  }
}

TEST(Sampler, RanksSlicingAGlobalBatchAcrossAnEpochBoundary) {
  const int64_t N = 100, B = 32, ranks = 4;
  GlobalSampler serial(N, 8);
  const int64_t first = 3 * B;  // samples 96..127: crosses 100
  const std::vector<int64_t> global = read(serial, first, B);
  std::vector<int64_t> joined;
  for (int64_t r = 0; r < ranks; ++r) {
    GlobalSampler rank_sampler(N, 8);
    std::vector<int64_t> part =
        read(rank_sampler, first + r * (B / ranks), B / ranks);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, global);
  // The part after the boundary is the start of epoch 1.
  GlobalSampler s(N, 8);
  std::vector<int64_t> e1 = read(s, N, N);
  EXPECT_TRUE(std::equal(global.begin() + 4, global.end(), e1.begin()));
}

TEST(Sampler, EpochOf) {
  GlobalSampler s(60000, 1);
  EXPECT_EQ(s.epoch_of(0), 0);
  EXPECT_EQ(s.epoch_of(59999), 0);
  EXPECT_EQ(s.epoch_of(60000), 1);
  EXPECT_EQ(s.epoch_of(3 * 60000 + 5), 3);
}

TEST(Sampler, SingleItemDatasetAndEmptyDataset) {
  GlobalSampler s(1, 1);
  EXPECT_EQ(read(s, 0, 5), std::vector<int64_t>(5, 0));
  EXPECT_THROW(GlobalSampler(0, 1), ConfigError);
}

}  // namespace
}  // namespace ndt
