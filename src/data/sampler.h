// Deterministic global sampler: the order in which samples are visited.
//
// The global sample stream is the concatenation of one permutation of
// [0, N) per epoch; epoch e's permutation is a Fisher-Yates shuffle driven
// by the counter RNG under rng_subkey(rng_key(seed, "sampler"), e). It is a
// pure function of (seed, epoch), so every rank, layout and restart sees
// the same order; data-parallel ranks take slices of one global batch.
// Not thread-safe: each thread or rank owns its sampler.
#pragma once

#include <cstdint>
#include <vector>

namespace ndt {

// Maps global sample numbers (counting across epochs) to dataset indices.
class GlobalSampler {
 public:
  // Samples from a dataset of `dataset_size` (> 0) items under `seed`.
  GlobalSampler(int64_t dataset_size, uint64_t seed);

  // Writes the dataset indices of global samples [first, first + count)
  // into out[0..count). Slices may cross epoch boundaries. Keeps the
  // permutation of the last epoch touched and regenerates it on change.
  void indices(int64_t first, int64_t count, int64_t* out);

  // The epoch that global sample `global_sample` belongs to.
  int64_t epoch_of(int64_t global_sample) const;

 private:
  void load_epoch(int64_t epoch);

  int64_t size_;
  uint64_t key_;
  int64_t epoch_ = -1;         // epoch held in perm_, -1 before the first
  std::vector<int64_t> perm_;  // permutation of [0, size_) for epoch_
};

}  // namespace ndt
