#include "plan/sp_attention_cost.h"

#include <algorithm>

#include "base/check.h"

namespace ndt {
namespace {

struct Sizes {
  int64_t E, S, H;
};

Sizes sizes_of(const SpAttentionShape& s) {
  NDT_CHECK(
      s.N >= 1 && s.T % s.N == 0 && s.heads > 0 && s.C % s.heads == 0,
      ConfigError,
      "sequence-parallel attention shape: T ",
      s.T,
      " over ",
      s.N,
      " ranks, C ",
      s.C,
      " over ",
      s.heads,
      " heads");
  const int64_t Tl = s.T / s.N;
  return {s.B * Tl * s.C, s.B * s.heads * Tl * s.T, s.B * s.heads * Tl};
}

// n ring steps of `elements` each: a send and a recv per step.
void add_ring(CommVolume& v, int64_t n, int64_t elements) {
  v.add(OpType::kSend, n, elements);
  v.add(OpType::kRecv, n, elements);
}

}  // namespace

PassVolume rsa_attention_comm(const SpAttentionShape& s) {
  const Sizes z = sizes_of(s);
  PassVolume p;
  if (s.N == 1)
    return p;
  add_ring(p.fwd, 2 * (s.N - 1), z.E);
  add_ring(p.bwd, 2 * (s.N - 1), z.E);
  p.bwd.add(OpType::kReduceScatter, 2, z.E);
  return p;
}

int64_t rsa_attention_peak_bytes(const SpAttentionShape& s) {
  const Sizes z = sizes_of(s);
  return kFp32Bytes * (2 * z.S + 2 * s.N * z.E + 7 * z.E);
}

PassVolume ring_attention_comm(const SpAttentionShape& s) {
  const Sizes z = sizes_of(s);
  PassVolume p;
  if (s.N == 1)
    return p;
  add_ring(p.fwd, s.N - 1, 2 * z.E);
  add_ring(p.bwd, s.N - 1, 2 * z.E);
  add_ring(p.bwd, s.N, 2 * z.E);
  return p;
}

int64_t ring_attention_peak_bytes(
    const SpAttentionShape& s, SeqSplit split, int block, int threads) {
  const Sizes z = sizes_of(s);
  const SeqShard shard(split, s.T, 0, s.N);
  const int64_t q_len = shard.runs().front().length;
  return kFp32Bytes *
         (12 * z.E + 2 * z.H + 2 * int64_t{threads} * q_len * int64_t{block});
}

PassVolume ulysses_attention_comm(const SpAttentionShape& s) {
  const Sizes z = sizes_of(s);
  PassVolume p;
  if (s.N == 1)
    return p;
  NDT_CHECK(
      s.heads % s.N == 0,
      ConfigError,
      "Ulysses: ",
      s.heads,
      " heads over ",
      s.N,
      " ranks");
  p.fwd.add(OpType::kAllToAll, 1, 3 * z.E / s.N);
  p.fwd.add(OpType::kAllToAll, 1, z.E / s.N);
  p.bwd.add(OpType::kAllToAll, 1, z.E / s.N);
  p.bwd.add(OpType::kAllToAll, 1, 3 * z.E / s.N);
  return p;
}

int64_t ulysses_attention_peak_bytes(const SpAttentionShape& s) {
  const Sizes z = sizes_of(s);
  if (s.N == 1)
    return kFp32Bytes * (2 * z.S + 4 * z.E);
  return kFp32Bytes * std::max(2 * z.S + 8 * z.E, 13 * z.E);
}

}  // namespace ndt
