#include "tensor/memory.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace ndt {
namespace {

constexpr size_t kAlign = 64;

// Under AddressSanitizer (scripts/sanitize.sh) the bytes of a block
// beyond its request, and every byte of a cached block, are poisoned: a
// kernel that reads past its tensor, or a pointer kept past its tensor's
// free, is reported as if each tensor had its own malloc. No-ops otherwise.
#if defined(__SANITIZE_ADDRESS__)
void poison(void* ptr, size_t bytes) {
  __asan_poison_memory_region(ptr, bytes);
}
void unpoison(void* ptr, size_t bytes) {
  __asan_unpoison_memory_region(ptr, bytes);
}
#else
void poison(void*, size_t) {}
void unpoison(void*, size_t) {}
#endif

}  // namespace

// Size classes: multiples of 64 B up to 4 KiB, then 1/8 steps of the
// largest power of two not above the request, so a block wastes less than
// 12.5% (steps of the next power of two would waste up to 25% just above
// each power of two: a [2049 x 256] tensor in a 2.5 MiB block).
size_t mem_block_bytes(size_t bytes) {
  if (bytes == 0)
    bytes = 1;
  if (bytes <= 4096)
    return (bytes + kAlign - 1) / kAlign * kAlign;
  size_t pow2 = 4096;
  while (pow2 * 2 <= bytes)
    pow2 <<= 1;
  const size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

namespace {

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_lists;
  MemoryStats stats;
  int64_t cap = 0;  // live bytes allowed; 0: no cap
};

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1 << 20));
  return buf;
}

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tensors may outlive main
  return *p;
}

}  // namespace

std::string_view mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::kParams:
      return "params";
    case MemTag::kGrads:
      return "grads";
    case MemTag::kOptim:
      return "optim";
    case MemTag::kActs:
      return "acts";
    case MemTag::kComm:
      return "comm";
    case MemTag::kData:
      return "data";
    case MemTag::kOther:
      return "other";
    case MemTag::kCount:
      break;
  }
  return "?";
}

void* mem_alloc(size_t bytes, MemTag tag) {
  size_t size = mem_block_bytes(bytes);
  Pool& p = pool();
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    const int64_t live = p.stats.total_current_bytes;
    if (p.cap > 0 && live + int64_t(size) > p.cap) {
      throw MemoryError(
          "memory cap exceeded: an allocation of " + mib(int64_t(size)) + " (" +
          std::string(mem_tag_name(tag)) + ") on top of " + mib(live) +
          " live passes train.mem_cap_mb (" + mib(p.cap) +
          "); raise the cap or shrink the run (train.batch_size, "
          "model.seq_len, the model, or more parallel ranks)");
    }
    auto it = p.free_lists.find(size);
    if (it != p.free_lists.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      p.stats.cached_bytes -= size;
      p.stats.reused_allocs++;
    } else {
      p.stats.fresh_allocs++;
    }
    int t = static_cast<int>(tag);
    p.stats.current_bytes[t] += size;
    p.stats.total_current_bytes += size;
    if (p.stats.current_bytes[t] > p.stats.peak_bytes[t]) {
      p.stats.peak_bytes[t] = p.stats.current_bytes[t];
    }
    if (p.stats.total_current_bytes > p.stats.total_peak_bytes) {
      p.stats.total_peak_bytes = p.stats.total_current_bytes;
    }
  }
  if (ptr == nullptr) {
    ptr = std::aligned_alloc(kAlign, size);
    if (ptr == nullptr)
      throw std::bad_alloc();
  }
  unpoison(ptr, bytes);
  poison(static_cast<char*>(ptr) + bytes, size - bytes);
  return ptr;
}

void mem_free(void* ptr, size_t bytes, MemTag tag) {
  if (ptr == nullptr)
    return;
  size_t size = mem_block_bytes(bytes);
  poison(ptr, size);  // before another thread can take it from the list
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.free_lists[size].push_back(ptr);
  p.stats.cached_bytes += size;
  int t = static_cast<int>(tag);
  p.stats.current_bytes[t] -= size;
  p.stats.total_current_bytes -= size;
}

MemoryStats memory_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.stats;
}

void memory_reset_peaks() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.stats.peak_bytes = p.stats.current_bytes;
  p.stats.total_peak_bytes = p.stats.total_current_bytes;
}

void memory_release_cached() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  for (auto& [size, list] : p.free_lists) {
    for (void* ptr : list) {
      unpoison(ptr, size);
      std::free(ptr);
    }
    list.clear();
  }
  p.stats.cached_bytes = 0;
}

void memory_set_cap(int64_t bytes) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.cap = bytes;
}

int64_t memory_cap() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.cap;
}

}  // namespace ndt
