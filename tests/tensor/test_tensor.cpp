// Tensor storage, the caching allocator's reuse and accounting, and the
// counter-based RNG's layout independence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "base/error.h"
#include "tensor/memory.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

namespace ndt {
namespace {

TEST(Tensor, ShapeViewCloneCopy) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(-1), 4);
  t.data()[5] = 7;
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.data()[5], 7);  // shares storage
  Tensor c = t.clone(MemTag::kOther);
  c.data()[5] = 1;
  EXPECT_EQ(t.data()[5], 7);
  t.copy_(c);
  EXPECT_EQ(t.data()[5], 1);
  EXPECT_THROW(t.view({5, 5}), Error);
  Tensor i({3}, MemTag::kData, DType::kI32);
  EXPECT_THROW(i.data(), Error);
}

// uint8 storage takes one byte per element (the ledger counts its size
// class), and slices, clones, copies and zeroing move bytes, not floats.
TEST(Tensor, Uint8StorageIsOneBytePerElement) {
  const MemoryStats s0 = memory_stats();
  Tensor u({1000, 784}, MemTag::kData, DType::kU8);
  const int d = static_cast<int>(MemTag::kData);
  EXPECT_EQ(
      memory_stats().current_bytes[d] - s0.current_bytes[d],
      static_cast<int64_t>(mem_block_bytes(784000)));
  EXPECT_EQ(dtype_bytes(DType::kU8), 1);
  for (int64_t i = 0; i < u.numel(); ++i)
    u.data_u8()[i] = static_cast<uint8_t>(i % 251);
  Tensor row = u.rows(999, 1);  // the last 784 bytes
  EXPECT_EQ(row.data_u8()[783], (784000 - 1) % 251);
  Tensor c = u.clone(MemTag::kOther);
  EXPECT_EQ(c.data_u8()[783999], (784000 - 1) % 251);
  row.zero_();
  EXPECT_EQ(u.data_u8()[999 * 784 - 1], (999 * 784 - 1) % 251);  // untouched
  EXPECT_EQ(u.data_u8()[999 * 784], 0);
  EXPECT_EQ(u.data_u8()[783999], 0);
  u.copy_(c);
  EXPECT_EQ(u.data_u8()[783999], (784000 - 1) % 251);
  EXPECT_THROW(u.data(), Error);
  EXPECT_THROW(u.data_i32(), Error);
  EXPECT_THROW(c.data(), Error);
}

TEST(Allocator, ReusesFreedBlocksAndTracksTags) {
  memory_release_cached();
  MemoryStats s0 = memory_stats();
  { Tensor a({1 << 20}, MemTag::kActs); }  // 4 MiB, freed to the cache
  MemoryStats s1 = memory_stats();
  EXPECT_EQ(s1.fresh_allocs, s0.fresh_allocs + 1);
  {
    Tensor b({1 << 20}, MemTag::kGrads);  // same size: reused
    MemoryStats s2 = memory_stats();
    EXPECT_EQ(s2.fresh_allocs, s1.fresh_allocs);
    EXPECT_EQ(s2.reused_allocs, s1.reused_allocs + 1);
    int g = static_cast<int>(MemTag::kGrads);
    EXPECT_EQ(s2.current_bytes[g] - s1.current_bytes[g], 4 << 20);
    EXPECT_GE(s2.peak_bytes[g], s2.current_bytes[g]);
  }
  MemoryStats s3 = memory_stats();
  EXPECT_EQ(s3.total_current_bytes, s0.total_current_bytes);
  EXPECT_EQ(mem_tag_name(MemTag::kOptim), "optim");
}

// The cap bounds the live bytes (size classes, every tag): an allocation
// that would pass it throws MemoryError naming the request and the cap,
// and leaves the ledger as it was; one that fits goes through.
TEST(Allocator, CapRefusesWhatWouldPassIt) {
  const int64_t live = memory_stats().total_current_bytes;
  memory_set_cap(live + (3 << 20));  // 3 MiB more than live now
  EXPECT_EQ(memory_cap(), live + (3 << 20));
  {
    Tensor a({1 << 19}, MemTag::kActs);  // 2 MiB: fits
    std::string what;
    try {
      Tensor b({1 << 19}, MemTag::kComm);  // 2 more: 4 > 3
    } catch (const MemoryError& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("memory cap exceeded"), std::string::npos) << what;
    EXPECT_NE(what.find("2.00 MiB (comm)"), std::string::npos) << what;
    EXPECT_NE(what.find("train.mem_cap_mb"), std::string::npos) << what;
    EXPECT_EQ(memory_stats().total_current_bytes, live + (2 << 20));
    Tensor c({1 << 18}, MemTag::kActs);  // 1 MiB: exactly at the cap
  }
  memory_set_cap(0);
  Tensor big({1 << 21}, MemTag::kActs);  // no cap: 8 MiB
  EXPECT_EQ(memory_stats().total_current_bytes, live + (8 << 20));
}

// Under AddressSanitizer (scripts/sanitize.sh) the pool poisons a block's
// bytes beyond its request and every byte of a cached block, so a read past
// a tensor (here inside its 64-byte block) or through a pointer kept past
// its free is reported; without the poisoning neither read is.
TEST(Allocator, SanitizerSeesReadsPastATensorAndAfterItsFree) {
#if !defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "checked only under AddressSanitizer (scripts/sanitize.sh)";
#else
  EXPECT_DEATH(
      {
        Tensor t({10});
        volatile float past = t.data()[10];
        (void)past;
      },
      "use-after-poison");
  EXPECT_DEATH(
      {
        float* kept = nullptr;
        {
          Tensor t({10});
          kept = t.data();
        }
        volatile float freed = kept[0];
        (void)freed;
      },
      "use-after-poison");
#endif
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32-10: counter and key all
  // zeros -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
  auto b = philox4x32(0, 0, 0);
  EXPECT_EQ(b[0], 0x6627e8d5u);
  EXPECT_EQ(b[1], 0xe169c58du);
  EXPECT_EQ(b[2], 0xbc57ac4cu);
  EXPECT_EQ(b[3], 0x9b00dbd8u);
}

// exact: a shard generated on its own equals the same slice of the whole.
TEST(Rng, ShardsEqualSlicesOfTheWhole) {
  uint64_t key = rng_key(7, "blocks.0.mlp.fc1.weight");
  std::vector<float> whole(1000), part(250);
  rng_fill_normal(whole.data(), 1000, key, 0, 0.0f, 0.02f);
  rng_fill_normal(part.data(), 250, key, 500, 0.0f, 0.02f);
  for (int i = 0; i < 250; ++i)
    EXPECT_EQ(part[i], whole[500 + i]);
  EXPECT_NE(rng_key(7, "a"), rng_key(7, "b"));
  EXPECT_NE(rng_key(7, "a"), rng_key(8, "a"));
}

TEST(Rng, NormalMoments) {
  uint64_t key = rng_key(1, "moments");
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = rng_normal(key, i);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  double u = 0;
  for (int i = 0; i < n; ++i)
    u += rng_uniform(key, i);
  EXPECT_NEAR(u / n, 0.5, 0.005);
}

}  // namespace
}  // namespace ndt
