#include "parallel/tp1d_norm.h"

#include "base/check.h"

namespace ndt {

TokenSplitDropout::TokenSplitDropout(
    const std::string& name,
    float p,
    ProcessGroup& tp,
    int64_t tokens_per_sample)
    : Dropout(name, p), tp_(tp), T_(tokens_per_sample) {
  NDT_CHECK(
      tokens_per_sample > 0,
      ConfigError,
      name,
      ": tokens_per_sample must be > 0");
}

// Global index of my first element: the micro-batch's first sample times
// the elements per sample (T * C), plus the tokens of the ranks before me
// (x holds N/tp tokens, so r * numel(x)).
uint64_t TokenSplitDropout::offset(const Tensor& x, const RunState& run) const {
  const uint64_t C = static_cast<uint64_t>(x.dim(-1));
  return static_cast<uint64_t>(run.sample_offset) * static_cast<uint64_t>(T_) *
             C +
         static_cast<uint64_t>(tp_.rank()) * static_cast<uint64_t>(x.numel());
}

}  // namespace ndt
