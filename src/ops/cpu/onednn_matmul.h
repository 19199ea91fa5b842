// oneDNN matmul primitives for ops::gemm (gemm.cpp): one primitive per
// product shape, created on first use and kept per thread.
#pragma once

namespace ndt::ops {

// C = alpha op(A) op(B) + beta C with gemm()'s row-major arguments (ops.h),
// computed on the calling thread by a cached oneDNN matmul primitive.
// Returns false, having written nothing, when oneDNN offers no optimized
// (brgemm) matmul for the call (rows of A, B or C not densely packed, e.g.
// a head inside the qkv buffer); the caller then uses dnnl_sgemm.
bool onednn_matmul(
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
    int ldc);

}  // namespace ndt::ops
