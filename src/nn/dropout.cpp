#include "nn/dropout.h"

#include "ops/ops.h"
#include "tensor/rng.h"

namespace ndt {

Dropout::Dropout(const std::string& name, float p) : name_(name), p_(p) {}

uint64_t Dropout::key(const RunState& run) const {
  uint64_t k = rng_key(run.seed, name_);
  return rng_subkey(k, static_cast<uint64_t>(run.step));
}

// Elements per sample times the global index of the first sample.
uint64_t Dropout::offset(const Tensor& x, const RunState& run) const {
  return static_cast<uint64_t>(run.sample_offset) *
         static_cast<uint64_t>(x.numel() / x.dim(0));
}

int64_t Dropout::mask_row_stride(const Tensor&) const {
  return 0;
}

Tensor Dropout::forward(const Tensor& x, Context& ctx) {
  if (p_ == 0.0f || !ctx.run.training)
    return x;
  Tensor y(x.shape(), MemTag::kActs);
  ops::dropout_forward(
      y, x, p_, key(ctx.run), offset(x, ctx.run), mask_row_stride(x));
  return y;
}

Tensor Dropout::backward(const Tensor& dy, Context& ctx) {
  if (p_ == 0.0f || !ctx.run.training)
    return dy;
  Tensor dx(dy.shape(), MemTag::kActs);
  ops::dropout_backward(
      dx, dy, p_, key(ctx.run), offset(dy, ctx.run), mask_row_stride(dy));
  return dx;
}

}  // namespace ndt
