#include "base/fault.h"

#ifdef NDT_FAULTS

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/check.h"

namespace ndt {
namespace {

struct FaultName {
  Fault fault;
  const char* name;
};

constexpr FaultName kFaultNames[] = {
    {Fault::kDpGradScale, "dp_grad_scale"},
    {Fault::kDpMeanNotSum, "dp_mean_not_sum"},
    {Fault::kAccumScale, "accum_scale"},
    {Fault::kTpSkipAllreduce, "tp_skip_allreduce"},
    {Fault::kTpSeqNormGrad, "tp_seq_norm_grad"},
    {Fault::kPpDropMicrobatch, "pp_drop_microbatch"},
    {Fault::kBucketSkip, "bucket_skip"},
    {Fault::kParamRenamed, "param_renamed"},
    {Fault::kTp2dSkipColReduce, "tp2d_skip_col_reduce"},
    {Fault::kTp2dDropoutColumn, "tp2d_dropout_column"},
    {Fault::kSampleAxesLoss, "sample_axes_loss"},
    {Fault::kTp2p5dSkipDepthReduce, "tp2p5d_skip_depth_reduce"},
    {Fault::kTp2p5dSameSamples, "tp2p5d_same_samples"},
    {Fault::kTp3dSkipSampleReduce, "tp3d_skip_sample_reduce"},
    {Fault::kTp3dBiasNoReduce, "tp3d_bias_no_reduce"},
    {Fault::kSpSkipGradReduce, "sp_skip_grad_reduce"},
    {Fault::kSpLocalPositions, "sp_local_positions"},
    {Fault::kZeroSkipBroadcast, "zero_skip_broadcast"},
    {Fault::kZeroDeferNoWait, "zero_defer_no_wait"},
    {Fault::kZero2StaleSlot, "zero2_stale_slot"},
    {Fault::kZero3StaleValues, "zero3_stale_values"},
    {Fault::kZero3SkipLayerGather, "zero3_skip_layer_gather"},
};

Fault parse_fault() {
  const char* env = std::getenv("NDT_FAULT");
  if (env == nullptr || *env == '\0')
    return Fault::kNone;
  std::string names;
  for (const FaultName& f : kFaultNames) {
    if (std::string(env) == f.name) {
      std::fprintf(stderr, "fault injection: %s\n", f.name);
      return f.fault;
    }
    names += names.empty() ? "" : ", ";
    names += f.name;
  }
  NDT_CHECK(
      false,
      ConfigError,
      "NDT_FAULT='",
      env,
      "' is not a known fault; allowed: ",
      names);
  return Fault::kNone;
}

}  // namespace

Fault injected_fault() {
  static const Fault fault = parse_fault();
  return fault;
}

}  // namespace ndt

#endif  // NDT_FAULTS
