// SpBuilder: the model builder of sequence parallelism, so that the serial
// model definitions (nn/model.h) build their sequence-parallel form
// unchanged. Activations between layers are my tokens [B, T_local, C] of
// the split (nn/seq_split.h) the attention core runs on; every parameter
// is replicated over sp, and since each rank sees only its tokens, the
// engine sums the gradients over sp (with dp).
//
//   layer              built                                comm on sp
//   linear, layernorm  serial (per token)                   -
//   attention_core     RingSelfAttention | RingAttention |  per algorithm
//                      UlyssesAttention (parallel.sp_attention)
//   dropout            SpDropout (the serial mask of my      -
//                      tokens)
//   token_embedding    SpTokenEmbedding (global positions;  -
//                      the data path gives my tokens)
//   patch_embedding    SpTokensOf(serial): my tokens         -
//   lm_head            serial on my tokens (loss over my    -
//                      tokens; the engine sums over sp)
//   classifier_head    serial on sp rank 0, fed every token fwd all-gather of
//                      (pooling needs them); the others     my tokens; bwd
//                      add no loss and no gradient          broadcast of dx
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"
#include "io/config.h"
#include "nn/builder.h"
#include "nn/seq_split.h"

namespace ndt {

// The serial builder's linear, layernorm and lm_head; the rest below.
class SpBuilder final : public SerialBuilder {
 public:
  // shard: my tokens of every sample (rank and size of `sp`).
  SpBuilder(ProcessGroup& sp, SpAttention attention, const SeqShard& shard);

  std::unique_ptr<Module> attention_core(int heads, bool causal) override;
  std::unique_ptr<Module> dropout(const std::string& name, float p) override;
  std::unique_ptr<LossHead> classifier_head(
      const ClassifierHeadOptions& options) override;
  std::unique_ptr<Module> token_embedding(
      const std::string& name,
      int vocab,
      int seq_len,
      int C,
      float init_std) override;
  std::unique_ptr<Module> patch_embedding(
      const PatchEmbeddingOptions& options) override;

 private:
  ProcessGroup& sp_;
  SpAttention attention_;
  SeqShard shard_;
};

}  // namespace ndt
