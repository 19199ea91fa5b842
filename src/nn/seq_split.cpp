#include "nn/seq_split.h"

#include "base/check.h"

namespace ndt {
namespace {

// Copies my tokens between full [B, T_global, X] and local [B, T_local, X],
// run by run (to_local: full -> local).
void move_tokens(
    const Tensor& full,
    const Tensor& local,
    const SeqShard& shard,
    bool to_local) {
  NDT_ASSERT(
      full.ndim() >= 2 && local.ndim() == full.ndim() &&
          full.dim(0) == local.dim(0) && full.dim(1) == shard.T_global() &&
          local.dim(1) == shard.T_local() && full.dtype() == local.dtype(),
      "tokens of ",
      shape_str(full.shape()),
      " <-> ",
      shape_str(local.shape()),
      " for T_global ",
      shard.T_global(),
      " over ",
      shard.size());
  const int64_t B = full.dim(0);
  const int64_t X = full.numel() / (B * shard.T_global());
  NDT_ASSERT(local.numel() == B * shard.T_local() * X);
  for (int64_t b = 0; b < B; ++b) {
    for (const TokenRun& run : shard.runs()) {
      Tensor f =
          full.slice((b * shard.T_global() + run.global) * X, {run.length * X});
      Tensor l =
          local.slice((b * shard.T_local() + run.local) * X, {run.length * X});
      if (to_local)
        l.copy_(f);
      else
        f.copy_(l);
    }
  }
}

}  // namespace

std::string_view to_string(SeqSplit split) {
  switch (split) {
    case SeqSplit::kContiguous:
      return "contiguous";
    case SeqSplit::kZigzag:
      return "zigzag";
  }
  return "?";
}

SeqShard::SeqShard(SeqSplit split, int64_t T_global, int rank, int size)
    : split_(split), T_global_(T_global), rank_(rank), size_(size) {
  NDT_ASSERT(
      size >= 1 && rank >= 0 && rank < size, "rank ", rank, " of ", size);
  const int64_t chunks = split == SeqSplit::kZigzag ? 2 * size : size;
  NDT_CHECK(
      T_global > 0 && T_global % chunks == 0,
      ConfigError,
      "sequence of ",
      T_global,
      " tokens does not split into ",
      chunks,
      " equal chunks (",
      to_string(split),
      " split over ",
      size,
      " sequence-parallel ranks)");
  const int64_t chunk = T_global / chunks;
  if (split == SeqSplit::kContiguous) {
    runs_ = {{0, rank * chunk, chunk}};
  } else {
    runs_ = {
        {0, rank * chunk, chunk},
        {chunk, (2 * int64_t{size} - 1 - rank) * chunk, chunk}};
  }
}

int64_t SeqShard::global_position(int64_t i) const {
  NDT_ASSERT(i >= 0 && i < T_local(), "local token ", i, " of ", T_local());
  for (const TokenRun& run : runs_) {
    if (i < run.local + run.length)
      return run.global + (i - run.local);
  }
  NDT_ASSERT(false, "runs do not cover local token ", i);
  return -1;
}

Tensor take_tokens(const Tensor& full, const SeqShard& shard) {
  NDT_ASSERT(full.ndim() >= 2, "take_tokens of ", shape_str(full.shape()));
  Shape s = full.shape();
  s[1] = shard.T_local();
  Tensor local(s, full.tag(), full.dtype());
  move_tokens(full, local, shard, true);
  return local;
}

void put_tokens(const Tensor& local, Tensor& full, const SeqShard& shard) {
  move_tokens(full, local, shard, false);
}

}  // namespace ndt
