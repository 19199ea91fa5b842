#include "parallel/tp2d_embedding.h"

#include <vector>

#include "base/check.h"
#include "base/fault.h"
#include "parallel/group_grad_sum.h"
#include "parallel/tp2d_grid.h"

namespace ndt {
namespace {

int local_width(const std::string& name, int C, int q) {
  NDT_CHECK(
      C % q == 0,
      ConfigError,
      name,
      ": width ",
      C,
      " is not divisible by the 2D grid side ",
      q);
  return C / q;
}

// The serial layer `inner`, built at width C/q, as the 2D layer: the
// parameter k (in collect order) is sharded on dimension feature_dims[k]
// over my row's index j, and the gradients are summed over my column.
std::unique_ptr<Module> sharded_by_feature(
    std::unique_ptr<Module> inner,
    const std::vector<int>& feature_dims,
    Mesh& mesh) {
  ProcessGroup& row = mesh.group("tp_col");
  std::vector<Parameter*> ps = inner->parameters();
  NDT_ASSERT(ps.size() == feature_dims.size());
  for (size_t k = 0; k < ps.size(); ++k) {
    Shape global = ps[k]->value.shape();
    global.at(feature_dims[k]) *= row.size();
    ps[k]->layout = grid_feature_layout(global, feature_dims[k], row);
  }
  return std::make_unique<GroupGradSum>(
      std::move(inner), mesh.group("tp_row"), Fault::kTp2dSkipColReduce);
}

}  // namespace

std::unique_ptr<Module> token_embedding_2d(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    Mesh& mesh) {
  const int C_local = local_width(name, C, mesh.size("tp_col"));
  return sharded_by_feature(
      std::make_unique<TokenEmbedding>(
          name, vocab, max_tokens, C_local, init_std),
      {1, 1},
      mesh);
}

std::unique_ptr<Module> patch_embedding_2d(
    const PatchEmbeddingOptions& options, Mesh& mesh) {
  PatchEmbeddingOptions local = options;
  local.dim = local_width(options.name, options.dim, mesh.size("tp_col"));
  std::vector<int> dims = {0, 0};  // patch.weight, patch.bias
  if (options.cls_token)
    dims.push_back(2);  // cls_token
  dims.push_back(2);    // positions
  return sharded_by_feature(
      std::make_unique<PatchEmbedding>(local), dims, mesh);
}

}  // namespace ndt
