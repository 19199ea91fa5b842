#include "nn/builder.h"

#include "nn/attention_core.h"
#include "nn/dropout.h"
#include "nn/layernorm.h"

namespace ndt {

std::unique_ptr<Module> SerialBuilder::linear(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    LinearRole role,
    float init_std) {
  (void)role;  // serial: every role is the full matrix
  return std::make_unique<Linear>(
      name, in_features, out_features, bias, act, init_std);
}

std::unique_ptr<Module> SerialBuilder::layernorm(
    const std::string& name, int C) {
  return std::make_unique<LayerNorm>(name, C);
}

std::unique_ptr<Module> SerialBuilder::attention_core(int heads, bool causal) {
  return std::make_unique<AttentionCore>(heads, causal);
}

std::unique_ptr<Module> SerialBuilder::dropout(
    const std::string& name, float p) {
  return std::make_unique<Dropout>(name, p);
}

std::unique_ptr<LossHead> SerialBuilder::classifier_head(
    const ClassifierHeadOptions& options) {
  return std::make_unique<ClassifierHead>(options, *this);
}

std::unique_ptr<LossHead> SerialBuilder::lm_head(const LmHeadOptions& options) {
  return std::make_unique<LmHead>(options, *this);
}

std::unique_ptr<Module> SerialBuilder::token_embedding(
    const std::string& name, int vocab, int seq_len, int C, float init_std) {
  return std::make_unique<TokenEmbedding>(name, vocab, seq_len, C, init_std);
}

std::unique_ptr<Module> SerialBuilder::patch_embedding(
    const PatchEmbeddingOptions& options) {
  return std::make_unique<PatchEmbedding>(options);
}

}  // namespace ndt
