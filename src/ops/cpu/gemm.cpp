// Row-major SGEMM on OpenBLAS.
//
// Shapes (row-major, leading dimension = elements between rows):
//   A: op(A) [M, K]; stored [M, K] (lda >= K) or, transposed, [K, M]
//      (lda >= M). B: op(B) [K, N]; stored [K, N] (ldb >= N) or [N, K]
//      (ldb >= K). C: [M, N], ldc >= N; C = alpha op(A) op(B) + beta C.
// Strided views (a head inside the qkv buffer) are passed with their
// parent's leading dimension. Bad leading dimensions are bugs: OpenBLAS
// would only print a message and return, so they are asserted here.
#include <cblas.h>

#include <algorithm>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt::ops {

void gemm(
    bool trans_a,
    bool trans_b,
    int M,
    int N,
    int K,
    float alpha,
    const float* A,
    int lda,
    const float* B,
    int ldb,
    float beta,
    float* C,
    int ldc) {
  NDT_ASSERT(M >= 0 && N >= 0 && K >= 0, "gemm sizes ", M, " ", N, " ", K);
  if (M == 0 || N == 0)
    return;
  NDT_ASSERT(ldc >= std::max(1, N), "gemm ldc ", ldc, " < N ", N);
  if (K == 0) {
    // op(A) op(B) is zero; BLAS argument checks would reject lda = 0.
    for (int i = 0; i < M; ++i) {
      float* c = C + static_cast<int64_t>(i) * ldc;
      for (int j = 0; j < N; ++j)
        c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    }
    return;
  }
  NDT_ASSERT(
      lda >= std::max(1, trans_a ? M : K), "gemm lda ", lda, " too small");
  NDT_ASSERT(
      ldb >= std::max(1, trans_b ? K : N), "gemm ldb ", ldb, " too small");
  cblas_sgemm(
      CblasRowMajor,
      trans_a ? CblasTrans : CblasNoTrans,
      trans_b ? CblasTrans : CblasNoTrans,
      M,
      N,
      K,
      alpha,
      A,
      lda,
      B,
      ldb,
      beta,
      C,
      ldc);
}

}  // namespace ndt::ops
