#include "parallel/tp2d_builder.h"

#include "base/check.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp2d_norm.h"

namespace ndt {
namespace {

[[noreturn]] void not_yet(const std::string& what) {
  throw ConfigError(
      "2D tensor parallelism has no " + what +
      " yet (parallel.tp_mode 2d is not available)");
}

}  // namespace

Tp2dBuilder::Tp2dBuilder(Mesh& mesh) : mesh_(mesh), q_(mesh.size("tp_col")) {}

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
      break;
  }
  not_yet("replicated linear layer (" + name + ")");
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
  if (p > 0)
    not_yet("dropout (" + name + ")");
  return serial_.dropout(name, p);
}

std::unique_ptr<LossHead> Tp2dBuilder::classifier_head(
    const ClassifierHeadOptions&) {
  not_yet("classifier head");
}

std::unique_ptr<LossHead> Tp2dBuilder::lm_head(const LmHeadOptions&) {
  not_yet("LM head");
}

std::unique_ptr<Module> Tp2dBuilder::token_embedding(
    const std::string& name, int, int, int, float) {
  not_yet("token embedding (" + name + ")");
}

std::unique_ptr<Module> Tp2dBuilder::patch_embedding(
    const PatchEmbeddingOptions&) {
  not_yet("patch embedding");
}

}  // namespace ndt
