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

}  // namespace ndt
