#include "parallel/ring_attention.h"

#include <cmath>

#include "base/check.h"
#include "ops/ops.h"
#include "parallel/sp_ring.h"

namespace ndt {
namespace {

constexpr int kTagKv = 3201;
constexpr int kTagDkv = 3202;

// The tiles of my queries against the K|V block of rank `owner`: one per
// (my run, their run) of the split.
template <typename F>
void for_tiles(const SeqShard& mine, int owner, F&& f) {
  const SeqShard theirs = mine.of_rank(owner);
  for (const TokenRun& qr : mine.runs()) {
    for (const TokenRun& kr : theirs.runs()) {
      ops::AttentionTile t;
      t.q_row = qr.local;
      t.q_len = qr.length;
      t.q_pos = qr.global;
      t.k_row = kr.local;
      t.k_len = kr.length;
      t.k_pos = kr.global;
      f(t);
    }
  }
}

// My K|V: columns [C, 3C) of qkv [B, T_local, 3C].
Tensor kv_block(const Tensor& qkv) {
  const int64_t C = qkv.dim(2) / 3;
  Tensor kv({qkv.dim(0), qkv.dim(1), 2 * C}, MemTag::kComm);
  ops::copy_columns(kv, 0, qkv, C, 2 * C);
  return kv;
}

}  // namespace

RingAttention::RingAttention(
    int heads, bool causal, ProcessGroup& sp, SeqSplit split, int block)
    : heads_(heads), causal_(causal), sp_(sp), split_(split), block_(block) {
  NDT_CHECK(
      block >= 1,
      ConfigError,
      "ring attention block must be >= 1, got ",
      block);
}

// saved: {qkv, out, lse}. out is the returned tensor: callers must not
// modify it in place.
Tensor RingAttention::forward(const Tensor& qkv, Context& ctx) {
  NDT_ASSERT(
      qkv.ndim() == 3 && qkv.dim(2) % (3 * heads_) == 0,
      "ring attention qkv ",
      shape_str(qkv.shape()),
      " heads ",
      heads_);
  const int64_t B = qkv.dim(0), Tl = qkv.dim(1), C = qkv.dim(2) / 3;
  const int N = sp_.size();
  const SeqShard mine(split_, Tl * N, sp_.rank(), N);
  Tensor out = Tensor::zeros({B, Tl, C}, MemTag::kActs);
  Tensor lse({B, heads_, Tl}, MemTag::kActs);
  Tensor l = Tensor::zeros({B, heads_, Tl}, MemTag::kActs);
  lse.fill_(-INFINITY);  // the running max until attention_tile_finish
  RingPass ring(sp_);
  ring.circulate(kv_block(qkv), kTagKv, [&](int owner, const Tensor& kv) {
    for_tiles(mine, owner, [&](const ops::AttentionTile& t) {
      forward_flops_ +=
          ops::attention_tile_forward(out, lse, l, qkv, kv, t, causal_, block_);
    });
  });
  ops::attention_tile_finish(out, lse, l);
  ctx.saved = {qkv, out, lse};
  return out;
}

Tensor RingAttention::backward(const Tensor& dout, Context& ctx) {
  const Tensor& qkv = ctx.saved.at(0);
  const Tensor& out = ctx.saved.at(1);
  const Tensor& lse = ctx.saved.at(2);
  const int64_t B = qkv.dim(0), Tl = qkv.dim(1), C = qkv.dim(2) / 3;
  const int N = sp_.size();
  const SeqShard mine(split_, Tl * N, sp_.rank(), N);
  Tensor D({B, heads_, Tl}, MemTag::kActs);
  ops::attention_tile_row_dot(D, dout, out);
  Tensor dqkv = Tensor::zeros(qkv.shape(), MemTag::kActs);
  RingPass ring(sp_);
  Tensor kv[2] = {kv_block(qkv), Tensor({B, Tl, 2 * C}, MemTag::kComm)};
  Tensor dkv[2] = {
      Tensor::zeros({B, Tl, 2 * C}, MemTag::kComm),
      Tensor({B, Tl, 2 * C}, MemTag::kComm)};
  // Step s: I hold rank (r - s)'s K|V and its dK|dV with the contributions
  // of ranks r - s .. r - 1; I add mine and pass it on. The receive of
  // step N - 1 brings my own dK|dV home, complete.
  for (int s = 0; s < N; ++s) {
    Tensor& cur = kv[s % 2];
    Tensor& dcur = dkv[s % 2];
    if (s + 1 < N)
      ring.start(cur, kv[(s + 1) % 2], kTagKv);
    if (N > 1)
      ring.start_recv(dkv[(s + 1) % 2], kTagDkv);
    for_tiles(mine, ring.owner(s), [&](const ops::AttentionTile& t) {
      backward_flops_ += ops::attention_tile_backward(
          dqkv, dcur, qkv, cur, dout, lse, D, t, causal_, block_);
    });
    if (N > 1)
      ring.start_send(dcur, kTagDkv);
    ring.wait();
  }
  const Tensor& home = dkv[N > 1 ? N % 2 : 0];
  ops::copy_columns(dqkv, C, home, 0, 2 * C);
  ctx.saved.clear();
  return dqkv;
}

}  // namespace ndt
