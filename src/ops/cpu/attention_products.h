// The matrix products inside one attention head (attention.cpp): small
// (T x hs by hs x T, T x T by T x hs), on strided views of the qkv buffer,
// many per step. Internal to src/ops/cpu.
//
// Each takes row-major operands with their leading dimensions, assigns
// C = alpha op(A) op(B), and, with `causal`, computes only what the causal
// mask leaves of it (plus at most a few entries past the diagonal, which
// the caller keeps at zero where they are read):
//   head_scores     C[M, N] = alpha A B^T, A [M, K], B [N, K]; causal: row i
//                   needs columns j <= i.
//   head_weighted   C[M, N] = A B, A [M, K], B [K, N]; causal: row i reads
//                   A[i, kk] for kk <= i only. trans_a: C = A^T B, A
//                   [K, M]; causal: row j reads A[kk, j] for kk >= j only.
// Entries of A past the diagonal that a causal product reads must be 0:
// row i of A may be read up to column i + kCausalReach - 1, or (trans_a)
// column j from row j - kCausalReach + 1.
//
// They run register-blocked kernels written for these shapes: a tile of 6
// (or, for N <= 32, 12) rows of C by up to 64 columns, its accumulators
// in registers (AVX-512; GCC's vector extensions elsewhere), A broadcast
// from its strided rows, B^T of head_scores packed once per call. Each
// entry of C is summed in the order kk = 0, 1, ..., so results depend
// neither on the thread count nor on the tiling; except that head_scores
// without the mask computes its last N % 64 columns, when there are at
// most 4 of them past the first 64 (T = 65 for a ViT's 64 patches and
// class token), as dot products in 16 lanes: a tile would spend a whole
// vector of multiply-adds per kk on each row's last column. Which columns
// those are depends on N only. `threaded`: split the
// tiles over this process's threads (false inside a parallel region).
// Each returns the multiply-adds inside the mask (times 2), which the
// caller adds to ops::gemm_flops_done once per op (one atomic add per
// head product, from every thread, cost 0.6% of the Fashion-MNIST ViT
// config's step at 2 threads).
#pragma once

#include <cstdint>

namespace ndt::ops::detail {

// How far past the diagonal a causal product may read A (above): the most
// rows of a tile.
constexpr int kCausalReach = 12;

int64_t head_scores(
    int M,
    int N,
    int K,
    float alpha,
    const float* A,
    int64_t lda,
    const float* B,
    int64_t ldb,
    float* C,
    int64_t ldc,
    bool causal,
    bool threaded);

int64_t head_weighted(
    bool trans_a,
    int M,
    int N,
    int K,
    const float* A,
    int64_t lda,
    const float* B,
    int64_t ldb,
    float* C,
    int64_t ldc,
    bool causal,
    bool threaded);

}  // namespace ndt::ops::detail
