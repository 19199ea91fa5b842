// Caching, tagged host allocator.
//
// Fresh pages are expensive on the machines ndtrain targets (first touch of
// a fresh 32 MiB block costs ~100x a reused one), so freed blocks are kept
// in per-size free lists and handed back on the next request of the same
// rounded size. The training loop therefore allocates nothing fresh after
// its first step; `memory_stats().fresh_allocs` lets tests assert that.
//
// Every block carries a MemTag; current and peak bytes are kept per tag so
// memory claims (ZeRO, pipeline schedules, recompute) are measured.
// Thread-safe. Does not return memory to the OS until memory_release_cached().
// Under AddressSanitizer the bytes it holds but has not handed out are
// poisoned (memory.cpp), so reads past a tensor or after its free show.
// A cap (memory_set_cap, train.mem_cap_mb) bounds the live bytes: the
// process's memory as the ledger counts it, so that "fits in X MiB" is a
// measured fact on any machine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ndt {

enum class MemTag : int {
  kParams = 0,
  kGrads,
  kOptim,
  kActs,
  kComm,
  kData,
  kOther,
  kCount
};

constexpr int kNumMemTags = static_cast<int>(MemTag::kCount);

std::string_view mem_tag_name(MemTag tag);

struct MemoryStats {
  std::array<int64_t, kNumMemTags> current_bytes{};  // live, per tag
  std::array<int64_t, kNumMemTags> peak_bytes{};     // max of current, per tag
  int64_t total_current_bytes = 0;
  int64_t total_peak_bytes = 0;
  int64_t cached_bytes = 0;   // held in free lists, not live
  int64_t fresh_allocs = 0;   // requests served by the OS
  int64_t reused_allocs = 0;  // requests served from the cache
};

// The bytes a block of `bytes` takes (its size class; what the ledger
// counts): multiples of 64 B up to 4 KiB, then 1/8 steps of the largest
// power of two not above `bytes` (less than 12.5% over).
size_t mem_block_bytes(size_t bytes);
// Returns a 64-byte aligned block of at least `bytes` bytes (rounded up).
void* mem_alloc(size_t bytes, MemTag tag);
// Returns a block obtained from mem_alloc with the same size and tag.
void mem_free(void* ptr, size_t bytes, MemTag tag);

MemoryStats memory_stats();
// Resets peaks to the current values (fresh/reused counters are kept).
void memory_reset_peaks();
// Frees every cached block back to the OS.
void memory_release_cached();
// Caps the live bytes (every tag, size classes counted): mem_alloc throws
// MemoryError (naming the request, its tag, the live bytes and the cap)
// rather than pass it, and changes nothing. 0: no cap (the default).
void memory_set_cap(int64_t bytes);
int64_t memory_cap();

}  // namespace ndt
