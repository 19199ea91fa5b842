#include "parallel/tp3d_builder.h"

#include "base/check.h"
#include "parallel/sp_dropout.h"
#include "parallel/tp2d_dropout.h"
#include "parallel/tp2d_embedding.h"
#include "parallel/tp2d_replicated_linear.h"
#include "parallel/tp3d_cube.h"
#include "parallel/tp3d_linear.h"
#include "parallel/tp3d_lm_head.h"
#include "parallel/tp3d_norm.h"

namespace ndt {
namespace {

FeatureSplit side_a_split(Mesh& mesh) {
  return {
      kTp3dOut,
      mesh.group(kTp3dOut),
      cube_sample_group(mesh, kSideA),
      Fault::kTp3dSkipSampleReduce};
}

}  // namespace

Tp3dBuilder::Tp3dBuilder(Mesh& mesh, std::optional<SeqShard> sp_tokens)
    : mesh_(mesh), p_(mesh.size(kTp3dWt)), sp_tokens_(std::move(sp_tokens)) {
  NDT_CHECK(
      mesh.size(kTp3dIn) == p_ && mesh.size(kTp3dOut) == p_,
      ConfigError,
      "3D tensor parallelism needs a cube, got tp_out ",
      mesh.size(kTp3dOut),
      " x tp_in ",
      mesh.size(kTp3dIn),
      " x tp_wt ",
      p_);
  // The layers' sample groups; the group of the weights (sharded over all
  // three axes) in the sorted order that norms ask for (optim/
  // layer_norms.h), and in the placement orders of the two sides' weights
  // that checkpoints gather over (train/run_checkpoint.cpp).
  cube_sample_group(mesh, kSideA);
  cube_sample_group(mesh, kSideB);
  mesh.group({kTp3dIn, kTp3dOut, kTp3dWt});
  mesh.group({kSideA.gather, kTp3dWt, kSideA.features});
  mesh.group({kSideB.gather, kTp3dWt, kSideB.features});
}

std::unique_ptr<Module> Tp3dBuilder::linear(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    LinearRole role,
    float init_std) {
  switch (role) {
    case LinearRole::kFirst:
      return std::make_unique<Linear3d>(
          name, in_features, out_features, bias, act, init_std, mesh_, kSideA);
    case LinearRole::kFirstQkv:
      return std::make_unique<Linear3d>(
          name,
          in_features,
          out_features,
          bias,
          act,
          init_std,
          mesh_,
          kSideA,
          3);
    case LinearRole::kSecond:
      return std::make_unique<Linear3d>(
          name, in_features, out_features, bias, act, init_std, mesh_, kSideB);
    case LinearRole::kReplicated: {
      const FeatureSplit s = side_a_split(mesh_);
      return std::make_unique<ReplicatedLinear2d>(
          name,
          in_features,
          out_features,
          bias,
          act,
          init_std,
          s.features,
          s.samples,
          s.skip_fault);
    }
  }
  NDT_ASSERT(false, "invalid LinearRole ", static_cast<int>(role));
  return nullptr;
}

std::unique_ptr<Module> Tp3dBuilder::layernorm(const std::string& name, int C) {
  return std::make_unique<LayerNorm3d>(name, C, mesh_);
}

std::unique_ptr<Module> Tp3dBuilder::attention_core(int heads, bool causal) {
  NDT_CHECK(
      heads % p_ == 0,
      ConfigError,
      "model.heads (",
      heads,
      ") must be divisible by the 3D cube side ",
      p_);
  return serial_.attention_core(heads / p_, causal);
}

std::unique_ptr<Module> Tp3dBuilder::dropout(const std::string& name, float p) {
  if (sp_tokens_) {
    const SpDropoutSplit split{
        .feature_block = mesh_.coord(kTp3dOut),
        .feature_blocks = mesh_.size(kTp3dOut)};
    return std::make_unique<SpDropout>(name, p, *sp_tokens_, split);
  }
  return std::make_unique<Dropout2d>(
      name, p, mesh_.size(kTp3dOut), mesh_.coord(kTp3dOut));
}

std::unique_ptr<LossHead> Tp3dBuilder::classifier_head(
    const ClassifierHeadOptions& options) {
  return std::make_unique<ClassifierHead>(options, *this);
}

std::unique_ptr<LossHead> Tp3dBuilder::lm_head(const LmHeadOptions& options) {
  return std::make_unique<LmHead3d>(options, mesh_);
}

std::unique_ptr<Module> Tp3dBuilder::token_embedding(
    const std::string& name, int vocab, int seq_len, int C, float init_std) {
  return token_embedding_sharded(
      name, vocab, seq_len, C, init_std, side_a_split(mesh_), sp_tokens_);
}

std::unique_ptr<Module> Tp3dBuilder::patch_embedding(
    const PatchEmbeddingOptions& options) {
  return patch_embedding_sharded(options, side_a_split(mesh_));
}

}  // namespace ndt
