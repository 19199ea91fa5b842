// Row-major SGEMM on OpenBLAS or oneDNN (ops.h, GemmBackend). With oneDNN
// most products run through dnnl_sgemm, those with a transposed B through
// a cached matmul primitive (onednn_matmul.h; use_matmul below; at several
// threads, per thread on its block of rows: matmul_by_rows), and weight
// gradients (transposed A) in slices of their long K (kTnMaxK).
//
// Shapes (row-major, leading dimension = elements between rows):
//   A: op(A) [M, K]; stored [M, K] (lda >= K) or, transposed, [K, M]
//      (lda >= M). B: op(B) [K, N]; stored [K, N] (ldb >= N) or [N, K]
//      (ldb >= K). C: [M, N], ldc >= N; C = alpha op(A) op(B) + beta C.
// Strided views (a head inside the qkv buffer) are passed with their
// parent's leading dimension. Bad leading dimensions are bugs: OpenBLAS
// would only print a message and return, so they are asserted here.
// Inside an OpenMP parallel region both libraries run on the calling
// thread alone (attention's per-head GEMMs rely on it).
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "base/check.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

GemmBackend backend_from_env() {
  const char* v = std::getenv("NDT_GEMM");
  if (v == nullptr || *v == '\0')
    return GemmBackend::kOneDnn;
  const std::string s = v;
  if (s == "openblas")
    return GemmBackend::kOpenBlas;
  if (s == "onednn")
    return GemmBackend::kOneDnn;
  NDT_CHECK(
      false,
      ConfigError,
      "NDT_GEMM=",
      s,
      ": the GEMM library must be openblas or onednn (unset: onednn)");
  return GemmBackend::kOneDnn;
}

// -1: not chosen yet (the environment decides on first use).
std::atomic<int> g_backend{-1};

std::atomic<int64_t> g_flops{0};

// Column split (oneDNN, several threads, outside a parallel region): a
// product with few rows and many columns runs each thread's block of
// columns (a multiple of 16) as one single-threaded dnnl_sgemm inside one
// parallel region. oneDNN's own threading of these shapes leaves threads
// waiting (bench/gemm.sh, 2 threads, 256x1024x1024: NT 246 -> 368 GFLOP/s,
// NN 326 -> 407; the MLP's products 7.6 -> 6.5 ms, its step 9.0 -> 8.3 ms).
// Products with more rows, where the split measured no faster, and narrow
// ones (a 10-class head) stay on oneDNN's own partition. Each element of C
// comes from one single-threaded call whose blocks depend only on the
// shape and the thread count, so results are deterministic.
constexpr int kSplitMinCols = 256;
constexpr int kSplitMaxRows = 1024;

// Threads to split a oneDNN product over by columns (1: no split).
int column_split_threads(int M, int N) {
  if (N < kSplitMinCols || M > kSplitMaxRows || omp_in_parallel())
    return 1;
  return std::max(1, std::min(omp_get_max_threads(), N / 64));
}

// oneDNN's matmul primitive (onednn_matmul.h) instead of dnnl_sgemm, on
// one thread (a 1-thread process, or inside a parallel region): for
// products with a transposed B (a layer's forward, x w^T) except narrow
// ones and those with many rows and many columns. GFLOP/s dnnl_sgemm ->
// matmul (bench/gemm.sh prints both), 1 thread: 256x1024x1024 192-194 ->
// 213-215, 4160x576x192 204 -> 213, 2048x384x384 207-211 -> 216-219; but
// 4160x768x192 218 -> 206-208, 2048x1152x384 217-219 -> 212-215,
// 256x10x1024 100 -> 75. Products without a transposed B were mostly
// slower as matmuls (TN 576x192x4160 211 -> 187). On 2 threads oneDNN's
// threading of the primitive was slower (4160x576x192 395 -> 342), and
// the column split's blocks write C with rows longer than the block, for
// which oneDNN has no brgemm matmul; nor for A or B rows that are not
// densely packed (lda = ldb = K here), such as a head inside the qkv
// buffer.
bool use_matmul(
    bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb) {
  constexpr int kMaxRowsWide = 1024, kMaxColsTall = 640;
  if (!trans_b || trans_a || lda != K || ldb != K || N < 64)
    return false;
  if (!omp_in_parallel() && omp_get_max_threads() > 1)
    return false;
  return M <= kMaxRowsWide || N <= kMaxColsTall;
}

// Runs part(i0, i1) in one parallel region of `threads` threads, each on
// its block of [0, n): bounds multiples of `align` that depend only on n
// and the thread count. Returns the first failure's status, or success.
template <typename Part>
dnnl_status_t split_over_threads(int threads, int n, int align, Part&& part) {
  std::atomic<int> failed{dnnl_success};
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int blocks = (n + align - 1) / align;
    const int i0 = std::min(n, blocks * t / nt * align);
    const int i1 = std::min(n, blocks * (t + 1) / nt * align);
    if (i1 > i0) {
      const dnnl_status_t s = part(i0, i1);
      if (s != dnnl_success)
        failed.store(s, std::memory_order_relaxed);
    }
  }
  return static_cast<dnnl_status_t>(failed.load());
}

// Row split (oneDNN, several threads, outside a parallel region): a
// layer's forward (x w^T, A and B densely packed) with many rows, which
// the column split leaves to oneDNN, runs each thread's block of rows as
// one single-threaded matmul primitive inside one parallel region. On one
// thread the primitive runs these shapes at 97% of the FMA peak; oneDNN's
// own threading of dnnl_sgemm left threads waiting (bench/gemm.sh, 2
// threads, GFLOP/s: 2048x384x1536 171-178 -> 222-224, 2048x128x512 185 ->
// 227, 2048x384x128 205-214 -> 215-226). Wider products measured slower
// split (4160x768x192 217 -> 191, 2048x1536x384 220 -> 211), hence
// kRowSplitMaxCols (docs/performance.md, "Forward products split by
// rows"). Each row of C comes from one single-threaded call whose blocks
// depend only on the shape and the thread count.
constexpr int kRowSplitMinRows = 512, kRowSplitMaxCols = 640;

// Threads to split a oneDNN product over by rows (1: no split), each
// with at least 256 rows.
int row_split_threads(
    bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb) {
  if (!trans_b || trans_a || lda != K || ldb != K || N < 64 ||
      N > kRowSplitMaxCols || M < kRowSplitMinRows || omp_in_parallel() ||
      column_split_threads(M, N) > 1)
    return 1;
  return std::max(1, std::min(omp_get_max_threads(), M / 256));
}

// C = alpha A B^T + beta C, each of `threads` threads its block of rows
// (a multiple of 8); A and B rows are K long, ldc >= N.
dnnl_status_t matmul_by_rows(
    int threads,
    int M,
    int N,
    int K,
    float alpha,
    const float* A,
    const float* B,
    float beta,
    float* C,
    int ldc) {
  return split_over_threads(threads, M, 8, [&](int i0, int i1) {
    const float* a = A + static_cast<int64_t>(i0) * K;
    float* c = C + static_cast<int64_t>(i0) * ldc;
    if (onednn_matmul(
            false, true, i1 - i0, N, K, alpha, a, K, B, K, beta, c, ldc))
      return dnnl_success;
    return dnnl_sgemm('N', 'T', i1 - i0, N, K, alpha, a, K, B, K, beta, c, ldc);
  });
}

// dnnl_sgemm, split by columns over the threads where
// column_split_threads says so.
dnnl_status_t onednn_sgemm(
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
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  // Columns [j0, j1) of C; row-major, like the arguments here.
  auto columns = [&](int j0, int j1) {
    const float* b = trans_b ? B + static_cast<int64_t>(j0) * ldb : B + j0;
    return dnnl_sgemm(
        ta, tb, M, j1 - j0, K, alpha, A, lda, b, ldb, beta, C + j0, ldc);
  };
  const int threads = column_split_threads(M, N);
  if (threads < 2)
    return columns(0, N);
  return split_over_threads(threads, N, 16, columns);
}

// Weight gradients (TN: dy^T x, the contraction over the rows of a batch)
// go to dnnl_sgemm in slices of at most kTnMaxK rows, accumulated in
// order. One call over a long K ran oneDNN's kernels markedly slower on
// the GPT's tall products (1 thread, operands cold, GFLOP/s one call ->
// slices of 512: 1536x384x2048 120-129 -> 139-152, 384x1536x2048
// 135-136 -> 145-154, 1536x384x1024 126 -> 145, 1024x256x2080 115-117 ->
// 131-139; 2 threads: 239 -> 282, 269 -> 289; 1152x384x2048 and
// 384x384x2048 the same within 3%; docs/performance.md "Weight gradients
// in slices of K").
constexpr int kTnMaxK = 512;

}  // namespace

GemmBackend gemm_backend() {
  int b = g_backend.load(std::memory_order_relaxed);
  if (b < 0) {
    b = static_cast<int>(backend_from_env());
    g_backend.store(b, std::memory_order_relaxed);
  }
  return static_cast<GemmBackend>(b);
}

void set_gemm_backend(GemmBackend backend) {
  g_backend.store(static_cast<int>(backend), std::memory_order_relaxed);
}

int64_t gemm_flops_done() {
  return g_flops.load(std::memory_order_relaxed);
}

void count_flops(int64_t flops) {
  g_flops.fetch_add(flops, std::memory_order_relaxed);
}

const char* to_string(GemmBackend backend) {
  return backend == GemmBackend::kOpenBlas ? "openblas" : "onednn";
}

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
  count_flops(2 * int64_t{M} * N * K);
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
  if (gemm_backend() == GemmBackend::kOneDnn) {
    const int row_threads =
        row_split_threads(trans_a, trans_b, M, N, K, lda, ldb);
    if (row_threads > 1) {
      const dnnl_status_t st =
          matmul_by_rows(row_threads, M, N, K, alpha, A, B, beta, C, ldc);
      NDT_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", st);
      return;
    }
    if (use_matmul(trans_a, trans_b, M, N, K, lda, ldb) &&
        onednn_matmul(
            trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
      return;
    // One slice of all of K unless A is transposed (only then is k0 > 0).
    const int slice = trans_a && !trans_b ? kTnMaxK : K;
    dnnl_status_t st = dnnl_success;
    for (int k0 = 0; k0 < K && st == dnnl_success; k0 += slice) {
      st = onednn_sgemm(
          trans_a,
          trans_b,
          M,
          N,
          std::min(slice, K - k0),
          alpha,
          A + int64_t{k0} * lda,
          lda,
          B + int64_t{k0} * ldb,
          ldb,
          k0 == 0 ? beta : 1.0f,
          C,
          ldc);
    }
    NDT_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", st);
    return;
  }
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
