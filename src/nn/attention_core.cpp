#include "nn/attention_core.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

AttentionCore::AttentionCore(int heads, bool causal)
    : heads_(heads), causal_(causal) {}

// saved: {qkv, att}.
Tensor AttentionCore::forward(const Tensor& qkv, Context& ctx) {
  NDT_ASSERT(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0);
  int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  Tensor out({B, T, C}, MemTag::kActs);
  Tensor att({B, heads_, T, T}, MemTag::kActs);
  ops::attention_forward(out, att, qkv, heads_, causal_);
  ctx.saved = {qkv, att};
  return out;
}

Tensor AttentionCore::backward(const Tensor& dout, Context& ctx) {
  const Tensor& qkv = ctx.saved.at(0);
  const Tensor& att = ctx.saved.at(1);
  Tensor dqkv(qkv.shape(), MemTag::kActs);
  Tensor datt(att.shape(), MemTag::kActs);
  ops::attention_backward(dqkv, datt, dout, qkv, att, heads_, causal_);
  ctx.saved.clear();
  return dqkv;
}

}  // namespace ndt
