#include "parallel/tp1d_builder.h"

#include "base/check.h"
#include "nn/attention_core.h"
#include "nn/dropout.h"
#include "nn/layernorm.h"
#include "parallel/group_grad_sum.h"
#include "parallel/token_split_layers.h"
#include "parallel/tp1d_embedding.h"
#include "parallel/tp1d_linear.h"
#include "parallel/tp1d_lm_head.h"
#include "parallel/tp1d_norm.h"

namespace ndt {

Tp1dBuilder::Tp1dBuilder(
    ProcessGroup& tp, bool token_split, int64_t tokens_per_sample)
    : tp_(tp), token_split_(token_split), T_(tokens_per_sample) {}

std::unique_ptr<Module> Tp1dBuilder::linear(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    LinearRole role,
    float init_std) {
  switch (role) {
    case LinearRole::kFirst:
    case LinearRole::kFirstQkv:
      return std::make_unique<ColumnLinear1d>(
          name,
          in_features,
          out_features,
          bias,
          act,
          init_std,
          tp_,
          token_split_,
          T_,
          role == LinearRole::kFirstQkv ? 3 : 1);
    case LinearRole::kSecond:
      NDT_ASSERT(act == Act::kNone, "row-parallel ", name, " with activation");
      return std::make_unique<RowLinear1d>(
          name, in_features, out_features, bias, init_std, tp_, token_split_);
    case LinearRole::kReplicated:
      return serial_.linear(
          name, in_features, out_features, bias, act, role, init_std);
  }
  NDT_ASSERT(false, "invalid LinearRole ", static_cast<int>(role));
  return nullptr;
}

std::unique_ptr<Module> Tp1dBuilder::layernorm(const std::string& name, int C) {
  if (!token_split_)
    return serial_.layernorm(name, C);
  return std::make_unique<GroupGradSum>(
      serial_.layernorm(name, C), tp_, Fault::kTpSeqNormGrad);
}

std::unique_ptr<Module> Tp1dBuilder::attention_core(int heads, bool causal) {
  NDT_ASSERT(heads % tp_.size() == 0, heads, " heads over ", tp_.size());
  return serial_.attention_core(heads / tp_.size(), causal);
}

std::unique_ptr<Module> Tp1dBuilder::dropout(const std::string& name, float p) {
  if (!token_split_)
    return serial_.dropout(name, p);
  return std::make_unique<TokenSplitDropout>(name, p, tp_, T_);
}

std::unique_ptr<LossHead> Tp1dBuilder::classifier_head(
    const ClassifierHeadOptions& options) {
  auto head = serial_.classifier_head(options);
  if (!token_split_)
    return head;
  return std::make_unique<GatheredHead>(std::move(head), tp_, T_);
}

std::unique_ptr<LossHead> Tp1dBuilder::lm_head(const LmHeadOptions& options) {
  return std::make_unique<VocabParallelLmHead>(options, tp_, token_split_, T_);
}

std::unique_ptr<Module> Tp1dBuilder::token_embedding(
    const std::string& name, int vocab, int seq_len, int C, float init_std) {
  return std::make_unique<VocabParallelEmbedding>(
      name, vocab, seq_len, C, init_std, tp_, token_split_);
}

std::unique_ptr<Module> Tp1dBuilder::patch_embedding(
    const PatchEmbeddingOptions& options) {
  auto embed = serial_.patch_embedding(options);
  if (!token_split_)
    return embed;
  return std::make_unique<SplitOutput>(std::move(embed), tp_);
}

}  // namespace ndt
