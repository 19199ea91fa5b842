// Deliberate bugs for testing the equivalence oracle (`ndtrain verify`).
//
// A build with the CMake option NDT_FAULTS (the binary ndtrain_faults)
// defines NDT_FAULTS; there the environment variable NDT_FAULT=<name>
// switches on one known bug at the place that names it, so that ctest can
// show verify failing on each. In every other build NDT_FAULT(kX) is the
// constant false and the faulty branches are compiled out: the product
// binary holds none of them.
//
//   name                 what goes wrong
//   dp_grad_scale        data-parallel rank/replica 1 scales its gradient by
//                        1.5 before the reduction
//   dp_mean_not_sum      data-parallel replicas average the gradient sum
//   accum_scale          micro-batch gradients divided by the micro-batch
//                        count a second time
//   tp_skip_allreduce    the backward all-reduce of CopyToTp is skipped
//   tp_seq_norm_grad     sequence-split LayerNorm gradients not summed over tp
//   pp_drop_microbatch   the last stage drops micro-batch 0's loss gradient
//   bucket_skip          DDP bucket 0 is never reduced
//   param_renamed        a parallel layout renames its last parameter (one
//                        serial parameter missing, one extra)
//   tp2d_skip_col_reduce 2D tensor parallelism: the parameter gradients of
//                        the embeddings and of the replicated linear layer
//                        (ViT classifier) are not summed over the ranks of
//                        the grid column (which hold other samples)
//   tp2d_dropout_column  2D dropout draws the mask of column block 0 on
//                        every grid column
//   sample_axes_loss     loss and evaluation statistics are not summed over
//                        the tensor-parallel mode's sample axes (2D: the
//                        grid rows)
//   tp2p5d_skip_depth_reduce  2.5D: parameter gradients are not summed over
//                        the depth axis (each grid keeps its own samples'
//                        share)
//   tp2p5d_same_samples  2.5D: every grid takes the samples of grid 0 (the
//                        batch split only over the grid rows)
//   tp3d_skip_sample_reduce  3D: the LayerNorm, embedding and classifier
//                        gradients are not summed over the ranks holding
//                        the other samples ({tp_wt, tp_in})
//   tp3d_bias_no_reduce  3D: a linear's bias gradient is not summed over
//                        the ranks holding the other samples
//   sp_skip_grad_reduce  sequence parallelism: parameter gradients are not
//                        summed over sp (each rank keeps its tokens' share)
//   sp_local_positions   sequence parallelism: the GPT's position embedding
//                        uses each rank's local positions 0..T/sp-1
//   zero_skip_broadcast  ZeRO stage 1: the owners of the gradient buckets
//                        update their parameters but never broadcast them
//   zero_defer_no_wait   ZeRO stages 1 and 2 with deferred broadcasts: the
//                        forward does not wait for a layer's broadcasts
//                        (the wait at the end of backward still runs), so
//                        layers read values from before the update
//   zero2_stale_slot     ZeRO stage 2: a shared gradient slot is not zeroed
//                        when its next bucket starts (that bucket's
//                        gradients add to the previous one's)
//   zero3_stale_values   ZeRO stage 3: the update does not mark the value
//                        slots old, so a bucket still in its slot is used
//                        with its values from before the update
//   zero3_skip_layer_gather  ZeRO stage 3: nothing is gathered before a
//                        module's later layers (only the module's hooks
//                        gather), so they read whatever their slots hold
#pragma once

namespace ndt {

enum class Fault {
  kNone,
  kDpGradScale,
  kDpMeanNotSum,
  kAccumScale,
  kTpSkipAllreduce,
  kTpSeqNormGrad,
  kPpDropMicrobatch,
  kBucketSkip,
  kParamRenamed,
  kTp2dSkipColReduce,
  kTp2dDropoutColumn,
  kSampleAxesLoss,
  kTp2p5dSkipDepthReduce,
  kTp2p5dSameSamples,
  kTp3dSkipSampleReduce,
  kTp3dBiasNoReduce,
  kSpSkipGradReduce,
  kSpLocalPositions,
  kZeroSkipBroadcast,
  kZeroDeferNoWait,
  kZero2StaleSlot,
  kZero3StaleValues,
  kZero3SkipLayerGather,
};

#ifdef NDT_FAULTS
// The fault named by NDT_FAULT (kNone when unset); an unknown name throws
// ConfigError listing the names. Read once.
Fault injected_fault();
#define NDT_FAULT(f) (::ndt::injected_fault() == ::ndt::Fault::f)
// The same for a Fault value held in a variable.
#define NDT_FAULT_IS(v) (::ndt::injected_fault() == (v))
#else
#define NDT_FAULT(f) false
#define NDT_FAULT_IS(v) ((void)(v), false)
#endif

}  // namespace ndt
