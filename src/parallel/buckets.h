// Gradient buckets for data parallelism: a pure assignment of parameters
// (in the order their gradients become final during backward) to buckets
// of about `bucket_bytes`, so every rank builds identical buckets and
// all-reduces them in the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace ndt {

struct Bucket {
  std::vector<int> params;       // indices into the backward-ordered list
  std::vector<int64_t> offsets;  // element offset of each param in the bucket
  int64_t numel = 0;
};

// `numels[i]` is the element count of the i-th parameter in backward order.
// Parameters are packed in order; a bucket closes once it reaches
// `bucket_bytes` (fp32), so a parameter larger than the limit gets a bucket
// of its own. Deterministic: depends only on its arguments.
std::vector<Bucket> assign_buckets(
    const std::vector<int64_t>& numels, int64_t bucket_bytes);

// ZeRO stage 1: the rank (0 .. ranks-1) that owns each bucket's optimizer
// state and update. Largest bucket first (ties: lower index), each to the
// rank with the fewest elements so far (ties: lower rank), so the update's
// work is balanced. Deterministic: depends only on its arguments.
std::vector<int> assign_bucket_owners(
    const std::vector<Bucket>& buckets, int ranks);

}  // namespace ndt
