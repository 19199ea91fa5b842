// How a sequence of T_global tokens is cut over the N ranks of a
// sequence-parallel group, and which global position each of my local
// tokens has. Attention uses it for its causal mask and its block order;
// position embeddings and the data path use it to take my tokens of every
// sample.
//
//   kContiguous  rank r holds tokens [r T_local, (r + 1) T_local)
//   kZigzag      the sequence is cut into 2N chunks of T_global / 2N
//                tokens; rank r holds chunks r and 2N - 1 - r, in that
//                order (the causal load balance of ALGORITHMS.md 2.4)
//
// Dimensions: B = samples, T_global = tokens per sample, T_local =
// T_global / N, X = any trailing width. Pure index math and copies; no
// communication.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace ndt {

enum class SeqSplit { kContiguous, kZigzag };

// "contiguous", "zigzag".
std::string_view to_string(SeqSplit split);

// Local tokens [local, local + length) are the global tokens [global,
// global + length).
struct TokenRun {
  int64_t local = 0;
  int64_t global = 0;
  int64_t length = 0;
};

class SeqShard {
 public:
  // Throws ConfigError when T_global is not divisible by N (kContiguous)
  // or by 2N (kZigzag), naming the split.
  SeqShard(SeqSplit split, int64_t T_global, int rank, int size);

  SeqSplit split() const {
    return split_;
  }
  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }
  int64_t T_global() const {
    return T_global_;
  }
  int64_t T_local() const {
    return T_global_ / size_;
  }
  // My tokens as runs of consecutive positions, in local order: one run
  // (kContiguous) or two (kZigzag).
  const std::vector<TokenRun>& runs() const {
    return runs_;
  }
  // Global position of local token i (0 <= i < T_local()).
  int64_t global_position(int64_t i) const;
  // The same split seen from another rank of the group.
  SeqShard of_rank(int rank) const {
    return SeqShard(split_, T_global_, rank, size_);
  }

 private:
  SeqSplit split_;
  int64_t T_global_;
  int rank_;
  int size_;
  std::vector<TokenRun> runs_;
};

// My tokens of every sample: full [B, T_global, X...] -> [B, T_local,
// X...] (a copy with full's tag and dtype; fp32 or int32).
Tensor take_tokens(const Tensor& full, const SeqShard& shard);
// Inverse of take_tokens: writes local [B, T_local, X...] into my tokens of
// full [B, T_global, X...].
void put_tokens(const Tensor& local, Tensor& full, const SeqShard& shard);

}  // namespace ndt
