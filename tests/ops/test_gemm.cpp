// ops::gemm against a double-precision reference loop: all four transpose
// combinations, padded leading dimensions, alpha/beta, beta = 0 ignoring C.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

struct GemmCase {
  int M, N, K;
};

// C = alpha op(A) op(B) + beta C in double, same storage conventions.
// With `mag`, also each element's |alpha| sum |a b| + |beta c|, the scale
// of its fp32 rounding error.
std::vector<double> gemm_reference(
    bool ta,
    bool tb,
    const GemmCase& s,
    float alpha,
    const float* A,
    int lda,
    const float* B,
    int ldb,
    float beta,
    const float* C,
    int ldc,
    std::vector<double>* mag = nullptr) {
  std::vector<double> out(static_cast<size_t>(s.M) * s.N);
  if (mag != nullptr)
    mag->assign(out.size(), 0.0);
  for (int i = 0; i < s.M; ++i) {
    for (int j = 0; j < s.N; ++j) {
      double acc = 0, abs_acc = 0;
      for (int k = 0; k < s.K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
        abs_acc += std::fabs(a * b);
      }
      double c = beta == 0.0f ? 0.0 : double(beta) * C[i * ldc + j];
      out[i * s.N + j] = double(alpha) * acc + c;
      if (mag != nullptr)
        (*mag)[i * s.N + j] = std::fabs(alpha) * abs_acc + std::fabs(c);
    }
  }
  return out;
}

// pad: elements past each row of A, B and C (leading dimension - width).
void check_gemm(const GemmCase& s, bool ta, bool tb, float beta, int pad = 3) {
  SCOPED_TRACE(
      testing::Message() << "M=" << s.M << " N=" << s.N << " K=" << s.K
                         << " ta=" << ta << " tb=" << tb << " beta=" << beta
                         << " pad=" << pad);
  const int lda = (ta ? s.M : s.K) + pad, ldb = (tb ? s.K : s.N) + pad;
  const int ldc = s.N + pad;
  Tensor A = test::randn({ta ? s.K : s.M, lda}, 1, "A");
  Tensor B = test::randn({tb ? s.N : s.K, ldb}, 2, "B");
  Tensor C = test::randn({s.M, ldc}, 3, "C");
  if (beta == 0.0f)
    C.fill_(NAN);  // beta = 0: C must not be read
  const Tensor C0 = C.clone(MemTag::kOther);
  const float alpha = 0.75f;
  std::vector<double> mag;
  std::vector<double> ref = gemm_reference(
      ta,
      tb,
      s,
      alpha,
      A.data(),
      lda,
      B.data(),
      ldb,
      beta,
      C0.data(),
      ldc,
      &mag);
  ops::gemm(
      ta,
      tb,
      s.M,
      s.N,
      s.K,
      alpha,
      A.data(),
      lda,
      B.data(),
      ldb,
      beta,
      C.data(),
      ldc);
  // An fp32 sum of K terms errs by about sqrt(K) units of 2^-24 of the
  // terms' absolute sum (mag); allowed: twice that, plus 1e-5.
  const double atol = 1e-5, rtol = 2.0 * std::sqrt(double(s.K)) * 0x1p-24;
  double worst = 0;
  for (int i = 0; i < s.M; ++i) {
    for (int j = 0; j < s.N; ++j) {
      double got = C.data()[i * ldc + j];
      double r =
          std::fabs(got - ref[i * s.N + j]) / (atol + rtol * mag[i * s.N + j]);
      worst = std::isnan(r) ? INFINITY : std::max(worst, r);
    }
    // Padding columns past N are untouched.
    for (int j = s.N; j < ldc; ++j) {
      EXPECT_EQ(
          std::isnan(C.data()[i * ldc + j]),
          std::isnan(C0.data()[i * ldc + j]));
      if (!std::isnan(C0.data()[i * ldc + j])) {
        EXPECT_EQ(C.data()[i * ldc + j], C0.data()[i * ldc + j]);
      }
    }
  }
  EXPECT_LE(worst, 1.0);
}

// The same product x w^T (dense rows) computed twice gives the same bits.
void expect_same_bits_twice(const GemmCase& s, uint64_t seed) {
  Tensor A = test::randn({s.M, s.K}, seed, "A");
  Tensor B = test::randn({s.N, s.K}, seed + 1, "B");
  Tensor C1({s.M, s.N}, MemTag::kOther), C2({s.M, s.N}, MemTag::kOther);
  for (Tensor* C : {&C1, &C2}) {
    ops::gemm(
        false,
        true,
        s.M,
        s.N,
        s.K,
        1.0f,
        A.data(),
        s.K,
        B.data(),
        s.K,
        0.0f,
        C->data(),
        s.N);
  }
  EXPECT_EQ(test::max_abs_diff(C1, C2), 0.0);
}

// For one test: oneDNN as the GEMM library; the process's library and
// thread count come back when it ends, however it ends.
struct OnOneDnn {
  const ops::GemmBackend backend = ops::gemm_backend();
  const int threads = ops::num_threads();
  OnOneDnn() {
    ops::set_gemm_backend(ops::GemmBackend::kOneDnn);
  }
  ~OnOneDnn() {
    ops::set_num_threads(threads);
    ops::set_gemm_backend(backend);
  }
};

// On both GEMM libraries, whatever NDT_GEMM says for the process.
TEST(Gemm, AllTransposesWithLeadingDimsMatchReference) {
  const ops::GemmBackend process = ops::gemm_backend();
  for (ops::GemmBackend b :
       {ops::GemmBackend::kOpenBlas, ops::GemmBackend::kOneDnn}) {
    ops::set_gemm_backend(b);
    EXPECT_NE(
        ops::blas_info().find(std::string("gemm=") + to_string(b)),
        std::string::npos)
        << ops::blas_info();
    for (GemmCase s : {GemmCase{5, 7, 6}, GemmCase{65, 33, 70}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          SCOPED_TRACE(to_string(b));
          check_gemm(s, ta, tb, -0.5f);
          check_gemm(s, ta, tb, 0.0f);
        }
      }
    }
  }
  ops::set_gemm_backend(process);
}

// oneDNN at several threads splits products with few rows and many columns
// into per-thread column blocks (gemm.cpp): widths that are not multiples
// of the 16-column block, every transpose, padded leading dimensions; and
// the same call twice gives the same bits.
TEST(Gemm, ColumnSplitMatchesReferenceAtSeveralThreads) {
  const OnOneDnn on_onednn;
  for (int t : {2, 3}) {
    ops::set_num_threads(t);
    SCOPED_TRACE(testing::Message() << "threads=" << t);
    for (GemmCase s : {GemmCase{37, 300, 45}, GemmCase{256, 1030, 20}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          check_gemm(s, ta, tb, -0.5f);
          check_gemm(s, ta, tb, 0.0f);
        }
      }
    }
    expect_same_bits_twice(GemmCase{64, 520, 33}, 5);
  }
}

// oneDNN runs 1-thread products with a transposed B through cached matmul
// primitives (gemm.cpp, onednn_matmul.cpp; dense rows, as the layers
// call it, or padded ones, which fall back to dnnl_sgemm): each shape at 1
// thread and at 2 and 3 (dnnl_sgemm, or the row split for 1100 rows and
// 80 columns), several betas and a second call
// on other buffers (a cache hit), and from inside a parallel region, where
// every thread runs its own product on one thread.
TEST(Gemm, TransposedBMatmulMatchesReference) {
  const OnOneDnn on_onednn;
  const GemmCase cases[] = {{70, 96, 50}, {1100, 80, 30}, {1100, 700, 8}};
  for (int t : {1, 2, 3}) {
    ops::set_num_threads(t);
    SCOPED_TRACE(testing::Message() << "threads=" << t);
    for (const GemmCase& s : cases) {
      for (int pad : {0, 3}) {
        for (float beta : {-0.5f, 0.0f, 1.0f, 0.0f})
          check_gemm(s, false, true, beta, pad);
      }
    }
  }
  // Inside a parallel region: per-thread products, checked afterwards.
  ops::set_num_threads(3);
  const GemmCase s{65, 72, 64};
  const int n = 6;
  Tensor A = test::randn({n, s.M, s.K}, 7, "A");
  Tensor B = test::randn({n, s.N, s.K}, 8, "B");
  Tensor C({n, s.M, s.N}, MemTag::kOther);
  // Product h's operands and output.
  auto a = [&](int h) { return A.data() + int64_t{h} * s.M * s.K; };
  auto b = [&](int h) { return B.data() + int64_t{h} * s.N * s.K; };
  auto c = [&](int h) { return C.data() + int64_t{h} * s.M * s.N; };
#pragma omp parallel for schedule(static, 1) num_threads(3)
  for (int h = 0; h < n; ++h) {
    ops::gemm(
        false,
        true,
        s.M,
        s.N,
        s.K,
        0.125f,
        a(h),
        s.K,
        b(h),
        s.K,
        0.0f,
        c(h),
        s.N);
  }
  for (int h = 0; h < n; ++h) {
    SCOPED_TRACE(testing::Message() << "product " << h);
    const std::vector<double> ref = gemm_reference(
        false, true, s, 0.125f, a(h), s.K, b(h), s.K, 0.0f, nullptr, s.N);
    double worst = 0;
    for (int i = 0; i < s.M * s.N; ++i) {
      const double got = c(h)[i];
      worst = std::max(worst, std::fabs(got - ref[i]));
    }
    EXPECT_LE(worst, 1e-5);  // |C| ~ 0.125 sqrt(K) = 1: fp32 sums of 64
  }
}

// oneDNN at several threads splits a layer's forward with many rows and at
// most 640 columns (x w^T, dense rows) into per-thread row blocks, each a
// 1-thread matmul primitive (gemm.cpp, row_split_threads): row counts that
// are not multiples of the 8-row block, several betas, padded leading
// dimensions (not split: dnnl_sgemm); and the same call twice gives the
// same bits.
TEST(Gemm, RowSplitMatchesReferenceAtSeveralThreads) {
  const OnOneDnn on_onednn;
  const GemmCase cases[] = {{1037, 200, 70}, {600, 640, 33}, {2050, 64, 130}};
  for (int t : {2, 3}) {
    ops::set_num_threads(t);
    SCOPED_TRACE(testing::Message() << "threads=" << t);
    for (const GemmCase& s : cases) {
      for (int pad : {0, 3}) {
        for (float beta : {-0.5f, 0.0f, 1.0f})
          check_gemm(s, false, true, beta, pad);
      }
    }
    expect_same_bits_twice(GemmCase{777, 96, 48}, 9);
  }
}

// oneDNN runs products with a transposed A (weight gradients) in slices
// of at most 512 rows of K, accumulated in order (gemm.cpp, kTnMaxK): K
// that leaves a short last slice, K of exactly two slices, padded leading
// dimensions, every beta (0: C is not read, only the first slice may
// overwrite it), at 1 thread and at 2, where a slice of few rows and many
// columns splits over the threads by columns.
TEST(Gemm, TransposedAInSlicesOfKMatchesReference) {
  const OnOneDnn on_onednn;
  for (int t : {1, 2}) {
    ops::set_num_threads(t);
    SCOPED_TRACE(testing::Message() << "threads=" << t);
    for (GemmCase s : {GemmCase{40, 300, 1300}, GemmCase{70, 33, 1024}}) {
      for (int pad : {0, 3}) {
        for (float beta : {-0.5f, 0.0f, 1.0f})
          check_gemm(s, true, false, beta, pad);
      }
    }
  }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  Tensor C = test::randn({3, 4}, 4, "C");
  Tensor expect = C.clone(MemTag::kOther);
  for (int64_t i = 0; i < expect.numel(); ++i)
    expect.data()[i] *= 2.0f;
  ops::gemm(
      false, false, 3, 4, 0, 1.0f, nullptr, 0, nullptr, 4, 2.0f, C.data(), 4);
  EXPECT_EQ(test::max_abs_diff(C, expect), 0.0);  // exact: one product each
}

}  // namespace
}  // namespace ndt
