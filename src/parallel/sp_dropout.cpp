#include "parallel/sp_dropout.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

SpDropout::SpDropout(const std::string& name, float p, const SeqShard& shard)
    : Dropout(name, p), shard_(shard) {}

Tensor SpDropout::apply(const Tensor& x, const RunState& run, bool grad) const {
  NDT_ASSERT(
      x.ndim() == 3 && x.dim(1) == shard_.T_local(),
      "sequence-parallel dropout input ",
      shape_str(x.shape()),
      " for ",
      shard_.T_local(),
      " tokens");
  const int64_t B = x.dim(0), Tl = x.dim(1), C = x.dim(2);
  const uint64_t k = key(run);
  Tensor y(x.shape(), MemTag::kActs);
  for (int64_t b = 0; b < B; ++b) {
    for (const TokenRun& r : shard_.runs()) {
      const int64_t at = (b * Tl + r.local) * C;
      const Tensor xs = x.slice(at, {r.length * C});
      Tensor ys = y.slice(at, {r.length * C});
      // The element's index in the step's global [B, T, C] batch.
      const uint64_t offset = static_cast<uint64_t>(
          ((run.sample_offset + b) * shard_.T_global() + r.global) * C);
      if (grad)
        ops::dropout_backward(ys, xs, p(), k, offset);
      else
        ops::dropout_forward(ys, xs, p(), k, offset);
    }
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
