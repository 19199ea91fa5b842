// Input layers of sequence parallelism: they produce my tokens [B,
// T_local, C] of the first activations, at their global positions
// (nn/seq_split.h).
//
//   SpTokenEmbedding  ids int32 [B, T_local] (my tokens, sliced by the data
//                     path) -> tokens[ids] + positions[global position],
//                     [B, T_local, C]. Parameters as TokenEmbedding's:
//                     "<name>.tokens.weight" [V, C], "<name>.positions.
//                     weight" [T_max, C], replicated; their gradients are
//                     my tokens' share (summed over sp with the others').
//   SpTokensOf        any input layer that makes every token [B, T, C]
//                     (the patch embedding: images are not cut by token):
//                     runs it and keeps my tokens; backward puts dy at my
//                     tokens of a zero [B, T, C] gradient, so its
//                     parameter gradients are my tokens' share.
// No communication.
#pragma once

#include <memory>
#include <string>

#include "nn/embedding.h"
#include "nn/module.h"
#include "nn/seq_split.h"

namespace ndt {

class SpTokenEmbedding final : public Module {
 public:
  SpTokenEmbedding(
      const std::string& name,
      int vocab,
      int max_tokens,
      int C,
      float init_std,
      const SeqShard& shard);
  Tensor forward(const Tensor& ids, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  int C_;
  SeqShard shard_;
  Tensor position_ids_;   // int32 [B * T_local]: global positions, per sample
  TokenEmbedding table_;  // the parameters (its forward is never run)
  Parameter& tokens_;
  Parameter& positions_;
};

class SpTokensOf final : public Module {
 public:
  SpTokensOf(std::unique_ptr<Module> inner, const SeqShard& shard)
      : inner_(std::move(inner)), shard_(shard) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override {
    inner_->collect_parameters(out);
  }

 private:
  std::unique_ptr<Module> inner_;
  SeqShard shard_;
};

}  // namespace ndt
