#include "parallel/tp2d_embedding.h"

#include <vector>

#include "base/check.h"
#include "base/fault.h"
#include "parallel/group_grad_sum.h"
#include "parallel/sp_embedding.h"
#include "parallel/tp2d_grid.h"

namespace ndt {
namespace {

int local_width(const std::string& name, int C, int parts) {
  NDT_CHECK(
      C % parts == 0,
      ConfigError,
      name,
      ": width ",
      C,
      " is not divisible by the ",
      parts,
      " feature blocks of the tensor-parallel layout");
  return C / parts;
}

// The serial layer `inner`, built at width C/parts, as the sharded layer:
// the parameter k (in collect order) is sharded on dimension
// feature_dims[k] over the split's axis, and the gradients are summed over
// the split's sample group.
std::unique_ptr<Module> sharded_by_feature(
    std::unique_ptr<Module> inner,
    const std::vector<int>& feature_dims,
    const FeatureSplit& split) {
  std::vector<Parameter*> ps = inner->parameters();
  NDT_ASSERT(ps.size() == feature_dims.size());
  for (size_t k = 0; k < ps.size(); ++k) {
    Shape global = ps[k]->value.shape();
    global.at(feature_dims[k]) *= split.features.size();
    ps[k]->layout = grid_feature_layout(
        global, feature_dims[k], split.features, split.axis);
  }
  return std::make_unique<GroupGradSum>(
      std::move(inner), split.samples, split.skip_fault);
}

FeatureSplit grid_split(Mesh& mesh) {
  return {
      "tp_col",
      mesh.group("tp_col"),
      mesh.group("tp_row"),
      Fault::kTp2dSkipColReduce};
}

}  // namespace

std::unique_ptr<Module> token_embedding_2d(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    Mesh& mesh,
    const std::optional<SeqShard>& sp_tokens) {
  return token_embedding_sharded(
      name, vocab, max_tokens, C, init_std, grid_split(mesh), sp_tokens);
}

std::unique_ptr<Module> patch_embedding_2d(
    const PatchEmbeddingOptions& options, Mesh& mesh) {
  return patch_embedding_sharded(options, grid_split(mesh));
}

std::unique_ptr<Module> token_embedding_sharded(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    const FeatureSplit& split,
    const std::optional<SeqShard>& sp_tokens) {
  const int C_local = local_width(name, C, split.features.size());
  std::unique_ptr<Module> inner;
  if (sp_tokens) {
    inner = std::make_unique<SpTokenEmbedding>(
        name, vocab, max_tokens, C_local, init_std, *sp_tokens);
  } else {
    inner = std::make_unique<TokenEmbedding>(
        name, vocab, max_tokens, C_local, init_std);
  }
  return sharded_by_feature(std::move(inner), {1, 1}, split);
}

std::unique_ptr<Module> patch_embedding_sharded(
    const PatchEmbeddingOptions& options, const FeatureSplit& split) {
  PatchEmbeddingOptions local = options;
  local.dim = local_width(options.name, options.dim, split.features.size());
  std::vector<int> dims = {0, 0};  // patch.weight, patch.bias
  if (options.cls_token)
    dims.push_back(2);  // cls_token
  dims.push_back(2);    // positions
  return sharded_by_feature(
      std::make_unique<PatchEmbedding>(local), dims, split);
}

}  // namespace ndt
