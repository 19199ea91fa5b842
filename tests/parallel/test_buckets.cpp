// assign_buckets is a pure function: every rank must derive the same
// buckets, in backward order, closing each once it reaches the byte limit.
// assign_bucket_owners (ZeRO stage 1) likewise: the same owners on every
// rank, largest bucket first to the least-loaded rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "parallel/buckets.h"

namespace ndt {
namespace {

TEST(Buckets, PacksInOrderAndClosesAtLimit) {
  // 4-byte elements, limit 400 bytes = 100 elements.
  auto b = assign_buckets({30, 50, 40, 250, 10, 5}, 400);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].params, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(b[0].offsets, (std::vector<int64_t>{0, 30, 80}));
  EXPECT_EQ(b[0].numel, 120);
  EXPECT_EQ(b[1].params, (std::vector<int>{3}));  // larger than the limit
  EXPECT_EQ(b[1].numel, 250);
  EXPECT_EQ(b[2].params, (std::vector<int>{4, 5}));
  EXPECT_EQ(b[2].offsets, (std::vector<int64_t>{0, 10}));
}

TEST(Buckets, EveryParameterExactlyOnce) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 57; ++i)
    sizes.push_back(1 + (i * 37) % 101);
  for (int64_t limit : {4, 64, 1000, 1 << 20}) {
    auto b = assign_buckets(sizes, limit);
    int next = 0;
    for (const Bucket& bk : b) {
      int64_t off = 0;
      for (size_t k = 0; k < bk.params.size(); ++k) {
        EXPECT_EQ(bk.params[k], next++);
        EXPECT_EQ(bk.offsets[k], off);
        off += sizes[bk.params[k]];
      }
      EXPECT_EQ(bk.numel, off);
    }
    EXPECT_EQ(next, 57);
    EXPECT_EQ(assign_buckets(sizes, limit).size(), b.size());
  }
}

Bucket bucket_of(int64_t numel) {
  Bucket b;
  b.params = {0};
  b.offsets = {0};
  b.numel = numel;
  return b;
}

TEST(BucketOwners, LargestFirstToTheLeastLoadedRank) {
  // Sizes 50, 30, 40, 20, 10 on 2 ranks: 50 -> 0, 40 -> 1, 30 -> 1 (40 <
  // 50), 20 -> 0 (50 < 70), 10 -> 0 (70 = 70: lower rank). Loads 80 / 70.
  std::vector<Bucket> b;
  for (int64_t n : {50, 30, 40, 20, 10})
    b.push_back(bucket_of(n));
  EXPECT_EQ(assign_bucket_owners(b, 2), (std::vector<int>{0, 1, 1, 0, 0}));
  // Equal sizes: ties go to the lower index and the lower rank.
  std::vector<Bucket> eq(5, bucket_of(7));
  EXPECT_EQ(assign_bucket_owners(eq, 3), (std::vector<int>{0, 1, 2, 0, 1}));
  // One rank owns everything; more ranks than buckets leaves some idle.
  EXPECT_EQ(assign_bucket_owners(b, 1), (std::vector<int>{0, 0, 0, 0, 0}));
  EXPECT_EQ(
      assign_bucket_owners({bucket_of(3), bucket_of(9)}, 4),
      (std::vector<int>{1, 0}));
}

TEST(BucketOwners, BalancedWithinTheLargestBucket) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 57; ++i)
    sizes.push_back(1 + (i * 37) % 101);
  for (int64_t limit : {64, 1000, 4000}) {
    auto b = assign_buckets(sizes, limit);
    int64_t largest = 0;
    for (const Bucket& bk : b)
      largest = std::max(largest, bk.numel);
    for (int ranks : {2, 3, 4}) {
      auto owner = assign_bucket_owners(b, ranks);
      ASSERT_EQ(owner.size(), b.size());
      std::vector<int64_t> load(ranks, 0);
      for (size_t k = 0; k < b.size(); ++k) {
        ASSERT_GE(owner[k], 0);
        ASSERT_LT(owner[k], ranks);
        load[owner[k]] += b[k].numel;
      }
      auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest) << "limit " << limit << " ranks " << ranks;
      EXPECT_EQ(assign_bucket_owners(b, ranks), owner);
    }
  }
}

// ZeRO: buckets small enough for every rank to own about its share.
TEST(Buckets, ZeroLimitsTheBucketsToAShareOfTheOwners) {
  // 16 elements over 2 owners: at most 2 per bucket (8 bytes); a smaller
  // limit asked for still rules (4 bytes: 1 per bucket).
  const std::vector<int64_t> ones(16, 1);
  EXPECT_EQ(assign_buckets(ones, 1 << 20).size(), 1u);
  EXPECT_EQ(assign_buckets(ones, 1 << 20, {}, 2).size(), 8u);
  EXPECT_EQ(assign_buckets(ones, 4, {}, 2).size(), 16u);
  // One owner: no limit of ZeRO's.
  EXPECT_EQ(assign_buckets(ones, 1 << 20, {}, 1).size(), 1u);
  // 385 elements over 2 owners: 193 bytes, below the 400 asked for; a
  // bucket closes once it reaches the limit, as without owners.
  const auto c = assign_buckets({30, 50, 40, 250, 10, 5}, 400, {}, 2);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].params, (std::vector<int>{0, 1}));
  EXPECT_EQ(c[1].params, (std::vector<int>{2, 3}));
  EXPECT_EQ(c[2].params, (std::vector<int>{4, 5}));
  EXPECT_EQ(c[2].offsets, (std::vector<int64_t>{0, 10}));
  // The verify MLP's parameters in backward order (b3, W3, b2, W2, b1,
  // W1): at 2 and 4 owners the first five stay below the limit until W1,
  // 95% of the elements, joins them: one bucket, one rank owns
  // everything. At 8 the limit (1646 elements) closes the first four.
  const std::vector<int64_t> mlp = {10, 320, 32, 2048, 64, 50176};
  for (int owners : {2, 4})
    EXPECT_EQ(assign_buckets(mlp, 4 << 20, {}, owners).size(), 1u) << owners;
  const auto m8 = assign_buckets(mlp, 4 << 20, {}, 8);
  ASSERT_EQ(m8.size(), 2u);
  EXPECT_EQ(m8[1].params, (std::vector<int>{4, 5}));
}

// Over many sizes and owners: each bucket is below the limit (a quarter
// of an owner's share) plus its last parameter, so each rank's load is
// within that of its share.
TEST(Buckets, ZeroSharesAreWithinABucketOfEqual) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 57; ++i)
    sizes.push_back(1 + (i * 37) % 101);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), 0L);
  const int64_t largest_param = *std::max_element(sizes.begin(), sizes.end());
  for (int owners : {2, 3, 4, 8}) {
    const auto b = assign_buckets(sizes, 1 << 20, {}, owners);
    const int64_t limit = (4 * total + 4 * owners - 1) / (4 * owners);
    for (const Bucket& bk : b)
      EXPECT_LT((bk.numel - sizes[bk.params.back()]) * 4, limit) << owners;
    const auto owner = assign_bucket_owners(b, owners);
    std::vector<int64_t> load(owners, 0);
    for (size_t k = 0; k < b.size(); ++k)
      load[owner[k]] += b[k].numel;
    const double share = double(total) / owners;
    const double slack = limit / 4.0 + largest_param;
    for (int r = 0; r < owners; ++r) {
      EXPECT_GT(load[r], share - slack) << owners << " rank " << r;
      EXPECT_LT(load[r], share + slack) << owners << " rank " << r;
    }
  }
}

// A pipeline rank's chunks (modules 6-5 and 2-1 here; 4-3 and 0 are
// another rank's) keep their buckets apart, however small the buckets'
// contents: the bucket open at module 5's last parameter closes there.
TEST(Buckets, ChunksKeepTheirBucketsApart) {
  const std::vector<int> module_of = {6, 6, 5, 2, 2, 1};
  const std::vector<bool> held = {false, true, true, false, false, true, true};
  const std::vector<bool> starts = split_at_gaps(module_of, held);
  EXPECT_EQ(
      starts, (std::vector<bool>{false, false, false, true, false, false}));
  const auto b = assign_buckets({5, 5, 5, 5, 5, 5}, 1 << 20, starts);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].params, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(b[1].params, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(b[1].offsets, (std::vector<int64_t>{0, 5, 10}));
  // A module without parameters in between is no gap.
  EXPECT_EQ(
      split_at_gaps({3, 1}, {true, true, true, true}),
      (std::vector<bool>{false, false}));
  // The size limit (10 elements here) still closes buckets inside a chunk.
  const auto c = assign_buckets({5, 5, 5, 5, 5, 5}, 40, starts);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[1].params, (std::vector<int>{2}));
  EXPECT_EQ(c[2].params, (std::vector<int>{3, 4}));
}

TEST(Slots, SharedOnlyAfterAWholeModule) {
  // Buckets in backward order over modules 6..0 (first, last module of
  // each), rank 0 owning buckets 1 and 4.
  const std::vector<Bucket> b = {
      bucket_of(10),
      bucket_of(50),
      bucket_of(30),
      bucket_of(20),
      bucket_of(40),
      bucket_of(25),
      bucket_of(5)};
  const std::vector<ModuleSpan> spans = {
      {6, 6}, {6, 5}, {5, 5}, {4, 4}, {3, 3}, {2, 2}, {1, 0}};
  const std::vector<int> owners = {1, 0, 1, 1, 0, 1, 1};
  const Slots g = assign_slots(b, spans, owners, 0);
  // 0 and 2 open the two slots (kMinSlots); 3 starts in module 4 right
  // after 2 ended in module 5, so only 0's slot (ended in 6) is free; 5
  // (module 2) may take 2's slot (ended in 5, earlier than 3 in 4); 6
  // (module 1) then takes 3's slot, ended in module 4.
  EXPECT_EQ(g.slot_of, (std::vector<int>{0, -1, 1, 0, -1, 1, 0}));
  EXPECT_EQ(g.capacity, (std::vector<int64_t>{20, 30}));
  // Rank 1 owns the rest: a slot each for 1 and 4 (kMinSlots).
  const Slots h = assign_slots(b, spans, owners, 1);
  EXPECT_EQ(h.slot_of, (std::vector<int>{-1, 0, -1, -1, 1, -1, -1}));
  EXPECT_EQ(h.capacity, (std::vector<int64_t>{50, 40}));
  // Everything owned: no slot.
  const Slots all = assign_slots(b, spans, std::vector<int>(b.size(), 0), 0);
  EXPECT_TRUE(all.capacity.empty());
}

TEST(Slots, OneModuleNeedsASlotPerBucket) {
  // Three buckets all in module 3 (one big module), then one in module 1:
  // the first three are open together, the fourth reuses the first slot.
  const std::vector<Bucket> b = {
      bucket_of(8), bucket_of(8), bucket_of(8), bucket_of(9)};
  const std::vector<ModuleSpan> spans = {{3, 3}, {3, 3}, {3, 3}, {1, 1}};
  const Slots g = assign_slots(b, spans, {1, 1, 1, 1}, 0);
  EXPECT_EQ(g.slot_of, (std::vector<int>{0, 1, 2, 0}));
  EXPECT_EQ(g.capacity, (std::vector<int64_t>{9, 8, 8}));
}

}  // namespace
}  // namespace ndt
