#include "parallel/tensor_parallel_mode.h"

#include "base/check.h"
#include "parallel/tp1d_builder.h"

namespace ndt {
namespace {

class NoTensorParallel final : public TensorParallelMode {
 public:
  std::vector<MeshAxis> axes() const override {
    return {{"tp", 1}};
  }
  std::unique_ptr<Builder> make_builder(Mesh&) const override {
    return std::make_unique<SerialBuilder>();
  }
  Shape local_activation(const Shape& global) const override {
    return global;
  }
};

class Tp1d final : public TensorParallelMode {
 public:
  Tp1d(int tp, bool token_split, int64_t tokens)
      : tp_(tp), token_split_(token_split), tokens_(tokens) {}
  std::vector<MeshAxis> axes() const override {
    return {{"tp", tp_}};
  }
  std::unique_ptr<Builder> make_builder(Mesh& mesh) const override {
    return std::make_unique<Tp1dBuilder>(
        mesh.group("tp"), token_split_, tokens_);
  }
  // With sequence-split regions an activation is my tokens [N / tp, C]
  // (parallel/regions.h); otherwise replicated.
  Shape local_activation(const Shape& global) const override {
    if (!token_split_)
      return global;
    const int64_t C = global.back();
    return {shape_numel(global) / C / tp_, C};
  }

 private:
  int tp_;
  bool token_split_;
  int64_t tokens_;
};

}  // namespace

std::unique_ptr<TensorParallelMode> make_tensor_parallel_mode(
    const Config& config) {
  const ParallelConfig& p = config.parallel;
  if (p.tp == 1)
    return std::make_unique<NoTensorParallel>();
  switch (p.tp_mode) {
    case TpMode::k1d:
      return std::make_unique<Tp1d>(p.tp, p.tp_seq, model_tokens(config.model));
  }
  NDT_ASSERT(false, "invalid TpMode ", static_cast<int>(p.tp_mode));
  return nullptr;
}

std::vector<MeshAxis> mesh_axes(const Config& config) {
  const ParallelConfig& p = config.parallel;
  const int dp = p.dp_mode == DpMode::kThreads ? 1 : p.dp;
  std::vector<MeshAxis> out;
  std::string order = p.order + ",";
  for (size_t at = 0, comma; (comma = order.find(',', at)) != std::string::npos;
       at = comma + 1) {
    const std::string name = order.substr(at, comma - at);
    if (name == "dp") {
      out.push_back({"dp", dp});
    } else if (name == "pp") {
      out.push_back({"pp", p.pp});
    } else {
      NDT_ASSERT(name == "tp", "parallel.order names axis ", name);
      for (const MeshAxis& a : make_tensor_parallel_mode(config)->axes())
        out.push_back(a);
    }
  }
  return out;
}

}  // namespace ndt
