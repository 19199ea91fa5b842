#include "parallel/ulysses_attention.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {
namespace {

int checked_local_heads(int heads, const ProcessGroup& sp) {
  NDT_CHECK(
      heads > 0 && heads % sp.size() == 0,
      ConfigError,
      "Ulysses attention splits the heads over the sequence-parallel ranks: "
      "model.heads (",
      heads,
      ") must be divisible by parallel.sp (",
      sp.size(),
      ")");
  return heads / sp.size();
}

// x [B, T_local, parts C] (my tokens; part p, heads of rank j at columns
// p C + j C_local) -> [B, T, parts C_local] (every token, my heads).
Tensor tokens_to_heads(const Tensor& x, int parts, ProcessGroup& sp) {
  const int N = sp.size();
  const int64_t B = x.dim(0), Tl = x.dim(1), C = x.dim(2) / parts;
  const int64_t Cl = C / N, W = parts * Cl, block = B * Tl * W;
  Tensor send({N, B * Tl, W}, MemTag::kComm);
  const Tensor xr = x.view({B * Tl, parts * C});
  for (int j = 0; j < N; ++j) {
    Tensor dst = send.slice(j * block, {B * Tl, W});
    for (int p = 0; p < parts; ++p)
      ops::copy_columns(dst, p * Cl, xr, p * C + j * Cl, Cl);
  }
  Tensor recv({N, B, Tl * W}, MemTag::kComm);
  sp.all_to_all(send.data(), recv.data(), block);
  // Block j holds rank j's tokens: rows [j T_local, (j+1) T_local).
  Tensor y({B, N * Tl, W}, MemTag::kActs);
  Tensor yr = y.view({B, N * Tl * W});
  for (int j = 0; j < N; ++j)
    ops::copy_columns(
        yr, j * Tl * W, recv.slice(j * block, {B, Tl * W}), 0, Tl * W);
  return y;
}

// Inverse of tokens_to_heads: y [B, T, parts C_local] -> [B, T_local,
// parts C].
Tensor heads_to_tokens(const Tensor& y, int parts, ProcessGroup& sp) {
  const int N = sp.size();
  const int64_t B = y.dim(0), Tl = y.dim(1) / N, W = y.dim(2);
  const int64_t Cl = W / parts, C = Cl * N, block = B * Tl * W;
  Tensor send({N, B, Tl * W}, MemTag::kComm);
  const Tensor yr = y.view({B, N * Tl * W});
  for (int j = 0; j < N; ++j) {
    Tensor dst = send.slice(j * block, {B, Tl * W});
    ops::copy_columns(dst, 0, yr, j * Tl * W, Tl * W);
  }
  Tensor recv({N, B * Tl, W}, MemTag::kComm);
  sp.all_to_all(send.data(), recv.data(), block);
  // Block j holds my tokens of rank j's heads.
  Tensor x({B, Tl, parts * C}, MemTag::kActs);
  Tensor xr = x.view({B * Tl, parts * C});
  for (int j = 0; j < N; ++j) {
    const Tensor src = recv.slice(j * block, {B * Tl, W});
    for (int p = 0; p < parts; ++p)
      ops::copy_columns(xr, p * C + j * Cl, src, p * Cl, Cl);
  }
  return x;
}

}  // namespace

UlyssesAttention::UlyssesAttention(int heads, bool causal, ProcessGroup& sp)
    : sp_(sp), core_(checked_local_heads(heads, sp), causal) {}

Tensor UlyssesAttention::forward(const Tensor& qkv, Context& ctx) {
  if (sp_.size() == 1)
    return core_.forward(qkv, ctx);
  NDT_ASSERT(
      qkv.ndim() == 3 && qkv.dim(2) % (3 * sp_.size()) == 0,
      "Ulysses qkv ",
      shape_str(qkv.shape()),
      " over ",
      sp_.size());
  Tensor out = core_.forward(tokens_to_heads(qkv, 3, sp_), ctx);
  ctx.ints = {qkv.dim(0), qkv.dim(1)};  // dout may come as [B T_local, C]
  return heads_to_tokens(out, 1, sp_);
}

Tensor UlyssesAttention::backward(const Tensor& dout, Context& ctx) {
  if (sp_.size() == 1)
    return core_.backward(dout, ctx);
  const int64_t B = ctx.ints.at(0), Tl = ctx.ints.at(1);
  Tensor dqkv = core_.backward(
      tokens_to_heads(dout.view({B, Tl, dout.numel() / (B * Tl)}), 1, sp_),
      ctx);
  return heads_to_tokens(dqkv, 3, sp_);
}

}  // namespace ndt
