// assign_buckets is a pure function: every rank must derive the same
// buckets, in backward order, closing each once it reaches the byte limit.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ndt
