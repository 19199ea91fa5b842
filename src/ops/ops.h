// Numerical kernels, each a forward/backward pair (CPU backend: BLAS for
// GEMM, OpenMP for the rest).
//
// Dimension letters: N = rows (B*T flattened), B = batch, T = tokens,
// C = channels, IC/OC = in/out features, V = vocabulary or classes,
// NH = heads, hs = C/NH, P = patch size.
//
// Contract (CONVENTIONS.md): activation gradients are assigned (=),
// parameter gradients are accumulated (+=). Outputs are preallocated by the
// caller with the shapes stated here; an undefined Tensor means "skip".
// Kernels are deterministic for a fixed thread count.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace ndt::ops {

// ---- threads and BLAS ------------------------------------------------------

// Sets the OpenMP and OpenBLAS thread counts.
void set_num_threads(int n);
int num_threads();
// e.g. "gemm=openblas (oneDNN 2.6.3), OpenBLAS 0.3.21 (openmp) core=Zen".
std::string blas_info();
// Subnormal floats read and written as zero (FTZ + DAZ) on the calling
// thread and the OpenMP pool's threads; threads created afterwards inherit
// it. The command line sets it once at start (denormals.cpp says why).
void flush_denormals();
bool denormals_flushed();  // on the calling thread

// ---- GEMM ------------------------------------------------------------------

// The library behind gemm(): OpenBLAS's cblas_sgemm or oneDNN's
// dnnl_sgemm (both on the one OpenMP pool). The process's choice is the
// environment variable NDT_GEMM=openblas|onednn (default onednn: its own
// CPU dispatch runs AVX-512 kernels where OPENBLAS_CORETYPE pins OpenBLAS
// to AVX2, and it was as fast or faster on the models' shapes otherwise,
// docs/performance.md "GEMM libraries"); a bad value throws ConfigError
// on first use.
// set_gemm_backend() overrides it.
enum class GemmBackend { kOpenBlas, kOneDnn };
GemmBackend gemm_backend();
void set_gemm_backend(GemmBackend backend);
const char* to_string(GemmBackend backend);

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C with
// explicit leading dimensions (elements between consecutive rows).
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
    int ldc);
// Multiply-adds times 2 (2 M N K) of every gemm call so far, in every
// thread, and of attention's head products (those inside the causal mask):
// the matmul work a step really does, which the models' flops_per_sample
// must equal (tests/nn/test_model_flops.cpp).
int64_t gemm_flops_done();
// Adds matmul work done outside gemm() to gemm_flops_done().
void count_flops(int64_t flops);

// ---- linear: weight stored [OC, IC] like torch.nn.Linear -------------------

// x [.., IC], w [OC, IC], b [OC] or undefined -> y [.., OC] = x w^T + b.
void linear_forward(
    Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);
// dx [.., IC] = dy w (skipped if undefined); dw += dy^T x; db += sum dy.
void linear_backward(
    Tensor& dx,
    Tensor& dw,
    Tensor& db,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w);

// ---- bias and activations ---------------------------------------------------

// y [.., C] += b [C].
void bias_add_forward(Tensor& y, const Tensor& b);
// db [C] += sum over rows of dy [.., C].
void bias_add_backward(Tensor& db, const Tensor& dy);

// GELU, tanh approximation (torch.nn.GELU(approximate="tanh")).
void gelu_forward(Tensor& y, const Tensor& x);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);

// Fused, one pass over memory: y = gelu(pre + b) for pre [N, C], and pre
// is overwritten with the slope gelu'(pre + b), all that the backward
// needs (so it computes no exp).
void bias_gelu_forward(Tensor& y, Tensor& pre, const Tensor& b);
// dpre = dy * slope (the slope bias_gelu_forward left); db += sum dpre (db
// may be undefined).
void bias_gelu_backward(
    Tensor& dpre, Tensor& db, const Tensor& dy, const Tensor& slope);

// ReLU (used by the MLP when configured).
void relu_forward(Tensor& y, const Tensor& x);
void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y);

// ---- LayerNorm
// ----------------------------------------------------------------

// x [N, C], w, b [C] -> y [N, C]; saves mean, rstd [N].
void layernorm_forward(
    Tensor& y,
    Tensor& mean,
    Tensor& rstd,
    const Tensor& x,
    const Tensor& w,
    const Tensor& b,
    float eps);
// dx = ... (assigned), dw += sum dy*xhat, db += sum dy.
void layernorm_backward(
    Tensor& dx,
    Tensor& dw,
    Tensor& db,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w,
    const Tensor& mean,
    const Tensor& rstd);

// Fused residual + LayerNorm: sum = a + r; y = layernorm(sum).
void residual_layernorm_forward(
    Tensor& sum,
    Tensor& y,
    Tensor& mean,
    Tensor& rstd,
    const Tensor& a,
    const Tensor& r,
    const Tensor& w,
    const Tensor& b,
    float eps);

// LayerNorm whose rows are split across ranks (cpu/layernorm_split.cpp):
// x [N, Cl] is a block of columns of rows of C_global columns; sums [N, 2]
// (doubles) are per-row partials that the caller sums over the ranks
// holding the rest of the row, between the two calls of each pass.
void layernorm_split_stats(double* sums, const Tensor& x);
void layernorm_split_forward(
    Tensor& y,
    Tensor& mean,
    Tensor& rstd,
    const Tensor& x,
    const double* sums,
    int64_t C_global,
    const Tensor& w,
    const Tensor& b,
    float eps);
void layernorm_split_grad_stats(
    double* sums,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w,
    const Tensor& mean,
    const Tensor& rstd);
// dx assigned; dw, db accumulated over my rows.
void layernorm_split_backward(
    Tensor& dx,
    Tensor& dw,
    Tensor& db,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w,
    const Tensor& mean,
    const Tensor& rstd,
    const double* sums,
    int64_t C_global);

// ---- softmax
// ------------------------------------------------------------------

// Row softmax over the last dim: y [N, C].
void softmax_forward(Tensor& y, const Tensor& x);
void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y);

// ---- scaled dot-product attention -------------------------------------------

// qkv [B, T, 3C] (q | k | v, head h at columns h*hs..), out [B, T, C],
// att [B, NH, T, T] saved softmax probabilities (masked entries are 0).
// Scale 1/sqrt(hs); causal masks keys after the query.
void attention_forward(
    Tensor& out, Tensor& att, const Tensor& qkv, int NH, bool causal);
// Score entries [query, key] of one head for T tokens that the mask
// leaves: T^2, or T (T + 1) / 2 causal. The work FLOP counts (MFU) use;
// the causal kernels compute a few more next to the diagonal
// (cpu/attention_products.h, kCausalReach).
int64_t attention_scores(int T, bool causal);
// dqkv [B, T, 3C] assigned. datt [B, NH, T, T] is scratch.
void attention_backward(
    Tensor& dqkv,
    Tensor& datt,
    const Tensor& dout,
    const Tensor& qkv,
    const Tensor& att,
    int NH,
    bool causal);

// ---- blockwise attention with online softmax (cpu/attention_tile.cpp) -----
//
// One query block meets one key/value block, one [q_len, block] score tile
// per head at a time, never the whole [q_len, k_len] block (ALGORITHMS.md
// 2.4, "Blockwise attention with online softmax"). Scale 1/sqrt(hs).
//   q, dq  [B, Tq, W]   q (dq) of head h at columns h*hs of the first C
//                       (the packed qkv with W = 3C, or q alone with W = C)
//   kv, dkv [B, Tk, 2C] k | v (dk | dv), head h at h*hs of each half
//   o, dout [B, Tq, C]  head h at columns h*hs
//   m, l, lse, D [B, NH, Tq]  per query row and head
// Causal: key position > query position is masked; key sub-blocks that
// every query of the tile masks are skipped. Both passes return the FLOPs
// of their GEMMs (2 per multiply-add) over all (b, h).
struct AttentionTile {
  int64_t q_row = 0, q_len = 0;  // query rows [q_row, q_row + q_len) of q
  int64_t k_row = 0, k_len = 0;  // key rows of kv
  int64_t q_pos = 0, k_pos = 0;  // global position of q_row / k_row
};
// Online-softmax step: with running row max m (start -inf), row sum l
// (start 0) and unnormalised output o (start 0), folds in the tile's keys.
int64_t attention_tile_forward(
    Tensor& o,
    Tensor& m,
    Tensor& l,
    const Tensor& q,
    const Tensor& kv,
    const AttentionTile& tile,
    bool causal,
    int block);
// After the last tile: o /= l and m <- m + log l (the row log-sum-exp).
// Every row must have met at least one visible key.
void attention_tile_finish(Tensor& o, Tensor& m, const Tensor& l);
// D[b, h, i] = sum over head h's columns of dout * o (assigned).
void attention_tile_row_dot(Tensor& D, const Tensor& dout, const Tensor& o);
// dq (first C columns) += and dkv += the tile's contributions, with the
// probabilities recomputed from lse.
int64_t attention_tile_backward(
    Tensor& dq,
    Tensor& dkv,
    const Tensor& q,
    const Tensor& kv,
    const Tensor& dout,
    const Tensor& lse,
    const Tensor& D,
    const AttentionTile& tile,
    bool causal,
    int block);

// dst [R, Wd] columns [dst_col, dst_col + width) = src [R, Ws] columns
// [src_col, src_col + width), each viewed by its last dimension.
void copy_columns(
    Tensor& dst,
    int64_t dst_col,
    const Tensor& src,
    int64_t src_col,
    int64_t width);

// ---- cross-entropy (fused with softmax)
// -----------------------------------------

// logits [N, V], targets int32 [N] in [0, V) -> losses [N] (-log p_target),
// probs [N, V] softmax. Returns the sum of losses (double accumulation).
double cross_entropy_forward(
    Tensor& losses, Tensor& probs, const Tensor& logits, const Tensor& targets);
// Throws DataError naming the first target outside [0, V) (bad labels or a
// tokenizer / vocabulary mismatch). The kernels above call it; so do
// layers that compute the loss themselves (vocabulary-parallel heads).
void cross_entropy_check_targets(const Tensor& targets, int64_t V);
// dlogits = (probs - onehot(targets)) * scale. dlogits may alias probs.
void cross_entropy_backward(
    Tensor& dlogits, const Tensor& probs, const Tensor& targets, float scale);

// ---- embeddings
// -------------------------------------------------------------------

// ids int32 [N] in [0, V), table [V, C] -> y [N, C].
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table);
// dtable [V, C] += scatter of dy [N, C] (deterministic order).
void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids);

// images [B, Cin, H, W] -> patches [B, (H/P)*(W/P), Cin*P*P], with each
// patch flattened in (c, py, px) order so a Linear on the patches equals a
// Conv2d(Cin, D, kernel=P, stride=P) whose weight is viewed [D, Cin*P*P].
void patchify_forward(Tensor& patches, const Tensor& images, int P);
// dimages [B, Cin, H, W] = col2im(dpatches) (assigned).
void patchify_backward(Tensor& dimages, const Tensor& dpatches, int P);

// ---- token pooling (ViT heads)
// ------------------------------------------------------

// x [B, T, C] -> y [B, C] mean over T.
void mean_tokens_forward(Tensor& y, const Tensor& x);
// dx [B, T, C] = dy / T broadcast (assigned).
void mean_tokens_backward(Tensor& dx, const Tensor& dy);

// ---- dropout (mask from the counter RNG, never stored)
// ---------------------------

// y = x * keep / (1 - p), keep_i = uniform(key, offset + i) >= p. y may
// alias x. `offset` places this block in a larger tensor (e.g. the first
// sample of a data-parallel slice), so every layout draws the same mask.
// row_stride > 0: x is a column block of a wider tensor, rows of
// x.dim(-1) elements whose first elements are row_stride apart in the mask
// (element c of row r is mask index offset + r * row_stride + c).
void dropout_forward(
    Tensor& y,
    const Tensor& x,
    float p,
    uint64_t key,
    uint64_t offset = 0,
    int64_t row_stride = 0);
void dropout_backward(
    Tensor& dx,
    const Tensor& dy,
    float p,
    uint64_t key,
    uint64_t offset = 0,
    int64_t row_stride = 0);

// ---- elementwise
// ----------------------------------------------------------------------

// y = a + b (residual forward; its backward is the identity on both inputs).
void add(Tensor& y, const Tensor& a, const Tensor& b);
// y += x.
void add_(Tensor& y, const Tensor& x);
// y *= s.
void scale_(Tensor& y, float s);
// y = 0, split over the threads when large (Tensor::zero_ is one memset).
void zero_(Tensor& y);
// Sum of squares in double (for norms).
double sum_squares(const Tensor& x);

}  // namespace ndt::ops
