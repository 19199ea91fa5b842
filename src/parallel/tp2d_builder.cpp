#include "parallel/tp2d_builder.h"

#include "base/check.h"
#include "parallel/sp_dropout.h"
#include "parallel/tp2d_dropout.h"
#include "parallel/tp2d_embedding.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp2d_lm_head.h"
#include "parallel/tp2d_norm.h"
#include "parallel/tp2d_replicated_linear.h"

namespace ndt {

Tp2dBuilder::Tp2dBuilder(Mesh& mesh, std::optional<SeqShard> sp_tokens)
    : mesh_(mesh), q_(mesh.size("tp_col")), sp_tokens_(std::move(sp_tokens)) {
  NDT_CHECK(
      mesh.size("tp_row") == q_,
      ConfigError,
      "2D tensor parallelism needs a square grid, got tp_row ",
      mesh.size("tp_row"),
      " x tp_col ",
      q_);
  // The group of a parameter sharded over both grid axes, in the sorted
  // order that norms (optim/layer_norms.h) and checkpoints ask for it.
  mesh.group({"tp_col", "tp_row"});
}

std::unique_ptr<Module> Tp2dBuilder::linear(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    LinearRole role,
    float init_std) {
  switch (role) {
    case LinearRole::kFirst:
    case LinearRole::kSecond:
      return std::make_unique<Linear2d>(
          name, in_features, out_features, bias, act, init_std, mesh_);
    case LinearRole::kFirstQkv:
      return std::make_unique<Linear2d>(
          name, in_features, out_features, bias, act, init_std, mesh_, 3);
    case LinearRole::kReplicated:
      return std::make_unique<ReplicatedLinear2d>(
          name, in_features, out_features, bias, act, init_std, mesh_);
  }
  NDT_ASSERT(false, "invalid LinearRole ", static_cast<int>(role));
  return nullptr;
}

std::unique_ptr<Module> Tp2dBuilder::layernorm(const std::string& name, int C) {
  return std::make_unique<LayerNorm2d>(name, C, mesh_);
}

std::unique_ptr<Module> Tp2dBuilder::attention_core(int heads, bool causal) {
  NDT_CHECK(
      heads % q_ == 0,
      ConfigError,
      "model.heads (",
      heads,
      ") must be divisible by the 2D grid side ",
      q_);
  return serial_.attention_core(heads / q_, causal);
}

std::unique_ptr<Module> Tp2dBuilder::dropout(const std::string& name, float p) {
  if (sp_tokens_) {
    const SpDropoutSplit split{
        .feature_block = mesh_.coord("tp_col"), .feature_blocks = q_};
    return std::make_unique<SpDropout>(name, p, *sp_tokens_, split);
  }
  return std::make_unique<Dropout2d>(name, p, mesh_);
}

std::unique_ptr<LossHead> Tp2dBuilder::classifier_head(
    const ClassifierHeadOptions& options) {
  return std::make_unique<ClassifierHead>(options, *this);
}

std::unique_ptr<LossHead> Tp2dBuilder::lm_head(const LmHeadOptions& options) {
  return std::make_unique<LmHead2d>(options, mesh_);
}

std::unique_ptr<Module> Tp2dBuilder::token_embedding(
    const std::string& name, int vocab, int seq_len, int C, float init_std) {
  return token_embedding_2d(
      name, vocab, seq_len, C, init_std, mesh_, sp_tokens_);
}

std::unique_ptr<Module> Tp2dBuilder::patch_embedding(
    const PatchEmbeddingOptions& options) {
  return patch_embedding_2d(options, mesh_);
}

}  // namespace ndt
