#include "train/ring_core_cost.h"

#include <algorithm>

#include "base/median.h"
#include "comm/self_process_group.h"
#include "nn/attention_core.h"
#include "parallel/ring_attention.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

// Median seconds of `core`'s forward, and of its forward and backward,
// on qkv, dout: {forward, backward} (the difference of the two).
RingCoreExtra timed(Module& core, const Tensor& qkv, const Tensor& dout) {
  constexpr int kRuns = 5;
  const double forward = median_seconds(kRuns, [&] {
    Context ctx;
    core.forward(qkv, ctx);
  });
  const double both = median_seconds(kRuns, [&] {
    Context ctx;
    core.forward(qkv, ctx);
    core.backward(dout, ctx);
  });
  return {forward, both - forward};
}

}  // namespace

RingCoreExtra measure_ring_core_extra(const ModelConfig& model) {
  // The serial core holds [heads, T, T] probabilities: past kRingCostMaxTokens
  // measure there and scale by the work's T^2.
  const int64_t full = model_tokens(model);
  const int64_t T = std::min(full, kRingCostMaxTokens);
  const double scale = static_cast<double>(full) * full / (double(T) * T);
  const int64_t C = model.dim;
  const bool causal = model.kind == ModelKind::kGpt;
  Tensor qkv({1, T, 3 * C}, MemTag::kOther);
  Tensor dout({1, T, C}, MemTag::kOther);
  rng_fill_normal(qkv.data(), qkv.numel(), rng_key(7, "qkv"), 0, 0.0f, 1.0f);
  rng_fill_normal(dout.data(), dout.numel(), rng_key(7, "dout"), 0, 0.0f, 1.0f);
  const std::unique_ptr<ProcessGroup> one = make_self_group("sp");
  RingAttention ring(
      model.heads,
      causal,
      *one,
      causal ? SeqSplit::kZigzag : SeqSplit::kContiguous);
  AttentionCore serial(model.heads, causal);
  const RingCoreExtra r = timed(ring, qkv, dout);
  const RingCoreExtra s = timed(serial, qkv, dout);
  return {
      scale * (r.forward_s - s.forward_s),
      scale * (r.backward_s - s.backward_s)};
}

}  // namespace ndt
