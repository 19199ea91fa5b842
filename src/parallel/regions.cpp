#include "parallel/regions.h"

#include "base/check.h"
#include "base/fault.h"

namespace ndt {

Tensor my_tokens(const Tensor& full, int rank, int parts) {
  const int64_t C = full.dim(full.ndim() - 1);
  const int64_t N = full.numel() / C;
  NDT_ASSERT(
      N % parts == 0, N, " tokens do not split over ", parts, " tp ranks");
  const int64_t n = N / parts;
  return full.slice(rank * n * C, {n, C});
}

Tensor all_gather_tokens(const Tensor& local, ProcessGroup& tp, Shape shape) {
  Tensor out(shape, MemTag::kActs);
  NDT_ASSERT(out.numel() == local.numel() * tp.size());
  tp.all_gather(local.data(), out.data(), local.numel());
  return out;
}

Tensor reduce_scatter_tokens(const Tensor& full, ProcessGroup& tp) {
  const int64_t C = full.dim(full.ndim() - 1);
  const int64_t N = full.numel() / C;
  NDT_ASSERT(N % tp.size() == 0, N, " tokens over ", tp.size(), " ranks");
  Tensor out({N / tp.size(), C}, MemTag::kActs);
  tp.reduce_scatter(full.data(), out.data(), out.numel());
  return out;
}

namespace {

Tensor all_reduced(const Tensor& x, ProcessGroup& tp) {
  Tensor y(x.shape(), MemTag::kActs);
  y.copy_(x);
  tp.all_reduce(y.data(), y.numel());
  return y;
}

}  // namespace

Tensor CopyToTp::forward(const Tensor& x, Context&) {
  return x;
}
Tensor CopyToTp::backward(const Tensor& dy, Context&) {
  if (NDT_FAULT(kTpSkipAllreduce))
    return dy;
  return all_reduced(dy, tp_);
}

Tensor ReduceFromTp::forward(const Tensor& x, Context&) {
  return all_reduced(x, tp_);
}
Tensor ReduceFromTp::backward(const Tensor& dy, Context&) {
  return dy;
}

Tensor SplitTokens::forward(const Tensor& x, Context& ctx) {
  ctx.ints = x.shape();  // backward gathers into this shape
  Tensor mine = my_tokens(x, tp_.rank(), tp_.size());
  Tensor y(mine.shape(), MemTag::kActs);
  y.copy_(mine);
  return y;
}
Tensor SplitTokens::backward(const Tensor& dy, Context& ctx) {
  return all_gather_tokens(dy, tp_, ctx.ints);
}

Tensor GatherTokens::forward(const Tensor& x, Context&) {
  const int64_t C = x.dim(x.ndim() - 1);
  const int64_t N = x.numel() / C * tp_.size();
  NDT_ASSERT(N % T_ == 0, N, " tokens are not whole samples of ", T_);
  return all_gather_tokens(x, tp_, {N / T_, T_, C});
}
Tensor GatherTokens::backward(const Tensor& dy, Context&) {
  if (grad_partial_)
    return reduce_scatter_tokens(dy, tp_);
  Tensor mine = my_tokens(dy, tp_.rank(), tp_.size());
  Tensor dx(mine.shape(), MemTag::kActs);
  dx.copy_(mine);
  return dx;
}

Tensor ScatterTokens::forward(const Tensor& x, Context& ctx) {
  ctx.ints = x.shape();  // backward gathers into this shape
  return reduce_scatter_tokens(x, tp_);
}
Tensor ScatterTokens::backward(const Tensor& dy, Context& ctx) {
  return all_gather_tokens(dy, tp_, ctx.ints);
}

}  // namespace ndt
