#include "train/product_rate.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "base/check.h"
#include "ops/ops.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

// (in, out) of the linear layers measure_products_seconds times.
std::vector<std::pair<int64_t, int64_t>> linear_shapes(
    const ModelConfig& model) {
  if (model.kind == ModelKind::kMlp) {
    std::vector<std::pair<int64_t, int64_t>> out;
    int64_t in = int64_t{model.channels} * model.image_size * model.image_size;
    for (int h : model.hidden) {
      out.push_back({in, h});
      in = h;
    }
    return out;
  }
  const int64_t C = model.dim, F = model.mlp_dim;
  return {{C, 3 * C}, {C, C}, {C, F}, {F, C}};
}

}  // namespace

double measure_products_seconds(const ModelConfig& model, int64_t rows) {
  NDT_CHECK(rows >= 1, ConfigError, "rows must be >= 1, got ", rows);
  struct Layer {
    Tensor x, w, b, y, dy, dx, dw, db;
  };
  std::vector<Layer> layers;
  uint64_t seed = 11;
  for (const auto& [in, out] : linear_shapes(model)) {
    Layer l{
        Tensor({rows, in}, MemTag::kOther),
        Tensor({out, in}, MemTag::kOther),
        Tensor({out}, MemTag::kOther),
        Tensor({rows, out}, MemTag::kOther),
        Tensor({rows, out}, MemTag::kOther),
        Tensor({rows, in}, MemTag::kOther),
        Tensor({out, in}, MemTag::kOther),
        Tensor({out}, MemTag::kOther)};
    for (Tensor* t : {&l.x, &l.w, &l.b, &l.dy}) {
      rng_fill_uniform(
          t->data(), t->numel(), rng_key(seed++, "products"), 0, -1, 1);
    }
    layers.push_back(std::move(l));
  }
  const auto run = [&] {
    for (Layer& l : layers) {
      ops::linear_forward(l.y, l.x, l.w, l.b);
      ops::linear_backward(l.dx, l.dw, l.db, l.dy, l.x, l.w);
    }
  };
  run();  // untimed: first-touch pages, the library's plans
  double best = 0;
  for (int i = 0; i < kProductRuns; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = i == 0 ? s : std::min(best, s);
  }
  return best;
}

ProductSlowdown::ProductSlowdown(ModelConfig model, int64_t reference)
    : model_(std::move(model)), reference_(reference) {}

double ProductSlowdown::seconds_per_row(int64_t rows) {
  auto it = measured_.find(rows);
  if (it == measured_.end()) {
    it = measured_
             .emplace(
                 rows, measure_products_seconds(model_, rows) / double(rows))
             .first;
  }
  return it->second;
}

double ProductSlowdown::operator()(int64_t rows) {
  if (rows >= reference_)
    return 1.0;
  return std::max(1.0, seconds_per_row(rows) / seconds_per_row(reference_));
}

}  // namespace ndt
