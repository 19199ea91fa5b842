// How much slower the model's matrix products run on fewer rows: the
// planner's MachineCost::product_slowdown (plan/layout_search.h),
// measured by `ndtrain plan`. Data and sequence parallelism, micro-
// batches and the grid modes' row blocks give a rank's linear layers
// fewer rows than one rank's whole batch, and a GEMM library runs small
// products below its large-product rate (on the Intel Xeon, the GPT
// benchmark model's linears at 512 rows 5–8% below 2048).
#pragma once

#include <cstdint>
#include <map>

#include "io/config.h"

namespace ndt {

// Seconds of one forward and backward (ops::linear_forward and
// linear_backward: y, dx, dw and db) of each of the model's linear layer
// shapes once, on `rows` rows: a transformer block's qkv, proj, fc1 and
// fc2 (ViT, GPT), or every hidden layer (MLP); the fastest of
// kProductRuns runs after one untimed, this thread count.
constexpr int kProductRuns = 5;
double measure_products_seconds(const ModelConfig& model, int64_t rows);

// The slowdown on `rows` rows against `reference` rows: their times per
// row, measure_products_seconds(rows) / rows over the same at reference,
// at least 1 (more rows are not counted faster); each rows value measured
// once.
class ProductSlowdown {
 public:
  ProductSlowdown(ModelConfig model, int64_t reference);
  double operator()(int64_t rows);

 private:
  double seconds_per_row(int64_t rows);
  ModelConfig model_;
  int64_t reference_;
  std::map<int64_t, double> measured_;  // rows -> seconds per row
};

}  // namespace ndt
