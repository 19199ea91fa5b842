#include "parallel/sp_dropout.h"

#include <algorithm>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

SpDropout::SpDropout(
    const std::string& name,
    float p,
    const SeqShard& shard,
    const SpDropoutSplit& split)
    : Dropout(name, p), shard_(shard), split_(split) {
  NDT_ASSERT(
      split.token_parts >= 1 && split.token_part >= 0 &&
          split.token_part < split.token_parts && split.feature_blocks >= 1 &&
          split.feature_block >= 0 &&
          split.feature_block < split.feature_blocks,
      "token part ",
      split.token_part,
      " of ",
      split.token_parts,
      ", feature block ",
      split.feature_block,
      " of ",
      split.feature_blocks);
}

Tensor SpDropout::apply(const Tensor& x, const RunState& run, bool grad) const {
  const int64_t Tl = shard_.T_local(), Cx = x.dim(-1);
  NDT_ASSERT(
      split_.token_parts > 1 ? x.ndim() == 2 : x.ndim() == 3 && x.dim(1) == Tl,
      "sequence-parallel dropout input ",
      shape_str(x.shape()),
      " for ",
      Tl,
      " tokens per sample in ",
      split_.token_parts,
      " parts");
  // A token's elements in the mask: C apart, mine from feature_block Cx.
  const int64_t C = Cx * split_.feature_blocks;
  const int64_t stride = split_.feature_blocks > 1 ? C : 0;
  // x's rows are the flattened (sample, local position) tokens [first,
  // first + rows).
  const int64_t rows = x.numel() / Cx;
  const int64_t first = split_.token_part * rows;
  const uint64_t k = key(run);
  Tensor y(x.shape(), MemTag::kActs);
  int64_t f = first;
  while (f < first + rows) {
    const int64_t b = f / Tl, l = f % Tl;
    const auto r = std::find_if(
        shard_.runs().begin(), shard_.runs().end(), [&](const TokenRun& t) {
          return l >= t.local && l < t.local + t.length;
        });
    NDT_ASSERT(r != shard_.runs().end(), "local token ", l, " in no run");
    // Tokens [f, f + n) are consecutive global positions of sample b.
    const int64_t n = std::min(r->local + r->length - l, first + rows - f);
    const int64_t at = (f - first) * Cx;
    const Tensor xs = x.slice(at, {n, Cx});
    Tensor ys = y.slice(at, {n, Cx});
    // The first element's index in the step's global [B, T, C] batch.
    const uint64_t offset = static_cast<uint64_t>(
        ((run.sample_offset + b) * shard_.T_global() + r->global + l -
         r->local) *
            C +
        split_.feature_block * Cx);
    if (grad)
      ops::dropout_backward(ys, xs, p(), k, offset, stride);
    else
      ops::dropout_forward(ys, xs, p(), k, offset, stride);
    f += n;
  }
  return y;
}

Tensor SpDropout::forward(const Tensor& x, Context& ctx) {
  if (p() == 0.0f || !ctx.run.training)
    return x;
  return apply(x, ctx.run, false);
}

Tensor SpDropout::backward(const Tensor& dy, Context& ctx) {
  if (p() == 0.0f || !ctx.run.training)
    return dy;
  return apply(dy, ctx.run, true);
}

}  // namespace ndt
