// gemm_bench: how fast the GEMM library (ops::gemm, NDT_GEMM selects it)
// runs the matrix products of one training step of each benchmark model
// (bench/configs/{mlp,vit,gpt}.yaml), timed alone on this thread count,
// against the FMA peak measured in the same run. The ratio is the MFU a
// step would reach if everything else in it took no time: the ceiling the
// GEMM library puts on `ndtrain bench`'s MFU.
//
// Shapes (row-major, as the layers call ops::gemm): every linear layer
// [rows, in] -> [rows, out] runs its forward (NT: x w^T), its input
// gradient (NN: dy w; not for the first layer) and its weight gradient (TN:
// dy^T x, accumulated). Attention's per-head products run in their own
// kernels (src/ops/cpu/attention_products.h), not in the GEMM library, and
// are left out; their share of the step's FLOPs is printed. Per model:
//   gemm model=M threads=T gemm_gflop=F gemm_ms=X gemm_gflops=G
//     fma_peak_gflops=P ceiling=G/P
// With oneDNN each shape line also shows dnnl_sgemm called directly
// (oneDNN's own threading), the alternative to the matmul primitives
// ops::gemm uses for some shapes (gemm.cpp, use_matmul), and a line per
// model gives the products' time and ceiling with dnnl_sgemm alone.
// Each shape is timed in 5 batches of at least 0.1 s; the fastest counts.
// The FMA peak is measured before and after the sweep; the higher counts.
//
// Those rates are for warm caches: every call reuses the same operands. In
// a training step each product reads activations and writes an output
// that no recent call touched. So each shape is also timed "cold", with
// every call on its own copy of A, B and C out of at least kColdBytes of
// copies, and the model line adds cold_gflops and cold_ceiling: the
// products at those rates, the nearer bound on a step's MFU.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tensor/rng.h"
#include "train/peak.h"

namespace {

struct Shape {
  bool trans_a, trans_b;
  int M, N, K, lda, ldb;
  float beta;
  int count;  // calls per step
};

struct Model {
  const char* name;
  std::vector<Shape> shapes;
  double other_gflop;  // step FLOPs not in `shapes` (attention)
};

// Forward, input gradient (if dx) and weight gradient of a linear layer.
void linear(
    std::vector<Shape>& s, int rows, int in, int out, int count, bool dx) {
  s.push_back({false, true, rows, out, in, in, in, 0.0f, count});
  if (dx)
    s.push_back({false, false, rows, in, out, out, in, 0.0f, count});
  s.push_back({true, false, out, in, rows, out, in, 1.0f, count});
}

// GFLOP of attention's head products in a step of `batch` samples of T
// tokens: scores and weighted sum over the pairs the mask leaves (the
// count in the models' flops_per_sample), 2 hs FLOPs per pair and head
// each, 3x for forward and backward.
double attention_gflop(int batch, int T, bool causal, int dim, int depth) {
  return 3.0 * depth * 4.0 *
         static_cast<double>(ndt::ops::attention_scores(T, causal)) * dim *
         batch / 1e9;
}

Model mlp() {  // batch 256, 784 -> 1024 -> 1024 -> 10
  Model m{"mlp", {}, 0.0};
  linear(m.shapes, 256, 784, 1024, 1, false);
  linear(m.shapes, 256, 1024, 1024, 1, true);
  linear(m.shapes, 256, 1024, 10, 1, true);
  return m;
}

Model vit() {  // batch 64, 32x32x3, patch 4, dim 192, depth 6, 3 heads
  Model m{"vit", {}, 0.0};
  const int rows = 64 * 65, dim = 192, depth = 6, t = 65;
  linear(m.shapes, 64 * 64, 48, dim, 1, false);  // patch embedding
  linear(m.shapes, rows, dim, 3 * dim, depth, true);
  linear(m.shapes, rows, dim, dim, depth, true);
  linear(m.shapes, rows, dim, 4 * dim, depth, true);
  linear(m.shapes, rows, 4 * dim, dim, depth, true);
  linear(m.shapes, 64, dim, 10, 1, true);  // head on the class token
  m.other_gflop = attention_gflop(64, t, false, dim, depth);
  return m;
}

Model gpt() {  // batch 8, context 256, dim 384, depth 6, vocab 256
  Model m{"gpt", {}, 0.0};
  const int rows = 8 * 256, dim = 384, depth = 6;
  linear(m.shapes, rows, dim, 3 * dim, depth, true);
  linear(m.shapes, rows, dim, dim, depth, true);
  linear(m.shapes, rows, dim, 4 * dim, depth, true);
  linear(m.shapes, rows, 4 * dim, dim, depth, true);
  linear(m.shapes, rows, dim, 256, 1, true);
  m.other_gflop = attention_gflop(8, 256, true, dim, depth);
  return m;
}

// Copies of the operands cycled through by a cold timing: more than any
// cache level of the machines this runs on holds.
constexpr int64_t kColdBytes = int64_t{512} << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Fastest of 5 batches, seconds per call of `s`: through ops::gemm,
// or (sgemm) dnnl_sgemm directly; cold: each call on the next of `copies`
// sets of operands (call i on set i mod copies), else all on set 0.
double time_shape(const Shape& s, bool sgemm, bool cold) {
  const int64_t a_n = int64_t(s.trans_a ? s.K : s.M) * s.lda;
  const int64_t b_n = int64_t(s.trans_b ? s.N : s.K) * s.ldb;
  const int64_t c_n = int64_t(s.M) * s.N;
  const int64_t set_bytes = (a_n + b_n + c_n) * int64_t{sizeof(float)};
  const int64_t copies =
      cold ? std::max<int64_t>(2, kColdBytes / set_bytes + 1) : 1;
  std::vector<float> a(a_n * copies), b(b_n * copies), c(c_n * copies);
  ndt::rng_fill_uniform(
      a.data(), a.size(), ndt::rng_key(1, "gemm.a"), 0, -1, 1);
  ndt::rng_fill_uniform(
      b.data(), b.size(), ndt::rng_key(1, "gemm.b"), 0, -1, 1);
  ndt::rng_fill_uniform(
      c.data(), c.size(), ndt::rng_key(1, "gemm.c"), 0, -1, 1);
  auto one = [&](int64_t set) {
    const float* as = a.data() + a_n * set;
    const float* bs = b.data() + b_n * set;
    float* out = c.data() + c_n * set;
    if (sgemm) {
      dnnl_sgemm(
          s.trans_a ? 'T' : 'N',
          s.trans_b ? 'T' : 'N',
          s.M,
          s.N,
          s.K,
          1.0f,
          as,
          s.lda,
          bs,
          s.ldb,
          s.beta,
          out,
          s.N);
      return;
    }
    ndt::ops::gemm(
        s.trans_a,
        s.trans_b,
        s.M,
        s.N,
        s.K,
        1.0f,
        as,
        s.lda,
        bs,
        s.ldb,
        s.beta,
        out,
        s.N);
  };
  // The set a call runs on. Cold: the one after the previous call's, across
  // batches (`next`). Warm: set 0.
  int64_t next = 0;
  auto calls = [&](int n) {
    const int64_t first = next;
    next = (next + n) % copies;
    for (int i = 0; i < n; ++i)
      one(cold ? (first + i) % copies : 0);
  };
  calls(1);  // warm up
  int n = 1;
  for (;;) {  // batch of at least 0.1 s
    auto t0 = std::chrono::steady_clock::now();
    calls(n);
    if (seconds_since(t0) >= 0.1)
      break;
    n *= 2;
  }
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    calls(n);
    best = std::min(best, seconds_since(t0) / n);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Model> models;
  for (int i = 1; i < argc; ++i) {
    const std::string m = argv[i];
    if (m == "mlp")
      models.push_back(mlp());
    else if (m == "vit")
      models.push_back(vit());
    else if (m == "gpt")
      models.push_back(gpt());
    else {
      std::fprintf(
          stderr,
          "gemm_bench: unknown model '%s' (mlp, vit, gpt)\n",
          m.c_str());
      return 2;
    }
  }
  if (models.empty())
    models = {mlp(), vit(), gpt()};
  std::printf(
      "gemm_bench: %s, threads=%d\n",
      ndt::ops::blas_info().c_str(),
      omp_get_max_threads());
  const bool onednn =
      ndt::ops::gemm_backend() == ndt::ops::GemmBackend::kOneDnn;
  for (const Model& m : models) {
    double peak = ndt::measure_fma_peak_gflops();
    double flop = 0, sec = 0, sec_sgemm = 0, sec_cold = 0;
    for (const Shape& s : m.shapes) {
      const double t = time_shape(s, false, false);
      const double f = 2.0 * s.M * s.N * s.K;
      std::printf(
          "  %s %c%c M=%5d N=%5d K=%5d x%-4d %7.1f GFLOP/s",
          m.name,
          s.trans_a ? 'T' : 'N',
          s.trans_b ? 'T' : 'N',
          s.M,
          s.N,
          s.K,
          s.count,
          f / t / 1e9);
      if (onednn) {
        const double t_sgemm = time_shape(s, true, false);
        std::printf("  (dnnl_sgemm %.1f)", f / t_sgemm / 1e9);
        sec_sgemm += t_sgemm * s.count;
      }
      const double t_cold = time_shape(s, false, true);
      std::printf("  cold %.1f\n", f / t_cold / 1e9);
      flop += f * s.count;
      sec += t * s.count;
      sec_cold += t_cold * s.count;
    }
    peak = std::max(peak, ndt::measure_fma_peak_gflops());
    if (onednn)
      std::printf(
          "  %s: dnnl_sgemm alone %.1f ms, %.1f GFLOP/s, ceiling %.3f\n",
          m.name,
          sec_sgemm * 1e3,
          flop / sec_sgemm / 1e9,
          flop / sec_sgemm / 1e9 / peak);
    if (m.other_gflop > 0)
      std::printf(
          "  %s: %.2f GFLOP of the step (attention) not included\n",
          m.name,
          m.other_gflop);
    std::printf(
        "gemm model=%s threads=%d gemm_gflop=%.2f gemm_ms=%.1f "
        "gemm_gflops=%.1f fma_peak_gflops=%.1f ceiling=%.3f "
        "cold_gflops=%.1f cold_ceiling=%.3f\n",
        m.name,
        omp_get_max_threads(),
        flop / 1e9,
        sec * 1e3,
        flop / sec / 1e9,
        peak,
        flop / sec / 1e9 / peak,
        flop / sec_cold / 1e9,
        flop / sec_cold / 1e9 / peak);
  }
  return 0;
}
