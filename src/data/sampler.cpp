#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "base/check.h"
#include "tensor/rng.h"

namespace ndt {

GlobalSampler::GlobalSampler(int64_t dataset_size, uint64_t seed)
    : size_(dataset_size), key_(rng_key(seed, "sampler")) {
  NDT_CHECK(
      dataset_size > 0,
      ConfigError,
      "sampler needs a non-empty dataset, got size ",
      dataset_size);
}

int64_t GlobalSampler::epoch_of(int64_t global_sample) const {
  NDT_ASSERT(global_sample >= 0, "global sample ", global_sample);
  return global_sample / size_;
}

void GlobalSampler::load_epoch(int64_t epoch) {
  if (epoch == epoch_)
    return;
  // Fisher-Yates from the top: step i swaps slot i with a slot in [0, i]
  // chosen by draw i of the epoch's stream. Modulo bias is < N / 2^64.
  const uint64_t key = rng_subkey(key_, static_cast<uint64_t>(epoch));
  perm_.resize(static_cast<size_t>(size_));
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  for (int64_t i = size_ - 1; i > 0; --i) {
    const uint64_t j =
        rng_u64(key, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1);
    std::swap(perm_[i], perm_[j]);
  }
  epoch_ = epoch;
}

void GlobalSampler::indices(int64_t first, int64_t count, int64_t* out) {
  NDT_ASSERT(first >= 0 && count >= 0, "samples [", first, ", +", count, ")");
  int64_t g = first;
  const int64_t end = first + count;
  while (g < end) {
    const int64_t epoch = g / size_;
    load_epoch(epoch);
    // Copy the run of samples that stays inside this epoch.
    const int64_t epoch_end = std::min(end, (epoch + 1) * size_);
    for (; g < epoch_end; ++g)
      *out++ = perm_[g - epoch * size_];
  }
}

}  // namespace ndt
