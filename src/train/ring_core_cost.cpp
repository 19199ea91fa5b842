#include "train/ring_core_cost.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/median.h"
#include "comm/self_process_group.h"
#include "nn/attention_core.h"
#include "parallel/ring_attention.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

// Median seconds of `core`'s forward and of its backward on qkv, dout,
// both timed in each of a few runs after one untimed.
RingCoreExtra timed(Module& core, const Tensor& qkv, const Tensor& dout) {
  constexpr int kRuns = 5;
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::vector<double> forward, backward;
  for (int i = 0; i <= kRuns; ++i) {
    Context ctx;
    const auto t0 = Clock::now();
    core.forward(qkv, ctx);
    const auto t1 = Clock::now();
    core.backward(dout, ctx);
    const auto t2 = Clock::now();
    if (i > 0) {
      forward.push_back(seconds(t0, t1));
      backward.push_back(seconds(t1, t2));
    }
  }
  return {median(forward), median(backward)};
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
      std::max(0.0, scale * (r.forward_s - s.forward_s)),
      std::max(0.0, scale * (r.backward_s - s.backward_s))};
}

}  // namespace ndt
