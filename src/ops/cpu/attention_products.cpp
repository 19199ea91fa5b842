// One attention head's matrix products (attention_products.h).
//
// A tile is R rows of C by NV 16-float vectors, R * NV <= 24 accumulators
// (6 rows by up to 4 vectors, or 12 rows by up to 2), all in registers
// with AVX-512. For each kk it loads row kk of B (the last vector partly,
// so B and C may end anywhere) and broadcasts A(r, kk) from A's strided
// rows, so only head_scores copies an operand (B^T, K x N with K the head
// size, once per call). dnnl_sgemm called per head ran these shapes at
// 48-82 GFLOP/s against 110+ for the layers' products on the same core
// (docs/performance.md): per-call overhead and packing for operands this
// small, and causal blocks of 64 rows where these tiles stop at the
// diagonal.
#include "ops/cpu/attention_products.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/attention_rows.h"
#include "ops/cpu/parallel_for.h"
#include "ops/ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ndt::ops::detail {
namespace {

// 16 floats: one AVX-512 register, two AVX ones; GCC's vector extensions
// give the kernel's arithmetic for either.
typedef float Vec __attribute__((vector_size(64)));

// v = the first n (1..16) floats at p, the rest zero; the first n of v to
// p. Nothing past p + n is touched (the last head's rows end the buffer).
// (Vectors pass by reference: by value they would change the ABI
// without AVX-512.)
inline void load_part(Vec& v, const float* p, int n) {
#if defined(__AVX512F__)
  v = Vec(_mm512_maskz_loadu_ps(first_lanes(n), p));
#else
  v = Vec{};
  for (int i = 0; i < n; ++i)
    v[i] = p[i];
#endif
}

inline void store_part(float* p, const Vec& v, int n) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, first_lanes(n), __m512(v));
#else
  for (int i = 0; i < n; ++i)
    p[i] = v[i];
#endif
}

// A(r, kk) = p[r * rs + kk * ks].
struct Strided {
  const float* p;
  int64_t rs, ks;
};

// C[r, 0 .. 16 NV) = alpha * sum over kk in [k0, k1) of A(r, kk) B[kk, ..]
// for r < R; the last vector of B's rows and C's rows holds `last` floats.
template <int R, int NV>
void tile(
    int k0,
    int k1,
    float alpha,
    Strided a,
    const float* b,
    int64_t ldb,
    float* c,
    int64_t ldc,
    int last) {
  // C's lines are usually not in cache: fetch them for writing while the
  // products run.
  Vec acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = Vec{};
      __builtin_prefetch(c + r * ldc + 16 * v, 1, 3);
    }
  }
  const float* ap = a.p + k0 * a.ks;
  const float* bp = b + k0 * ldb;
  for (int kk = k0; kk < k1; ++kk, ap += a.ks, bp += ldb) {
    Vec bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v + 1 < NV; ++v)
      std::memcpy(&bv[v], bp + 16 * v, sizeof(Vec));
    if (last == 16)
      std::memcpy(&bv[NV - 1], bp + 16 * (NV - 1), sizeof(Vec));
    else
      load_part(bv[NV - 1], bp + 16 * (NV - 1), last);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      // x - 0 is x for every x, so this is a broadcast load; 0 + x is not
      // (-0 + 0 = +0), and cost a scalar add before each broadcast.
      const Vec av = ap[r * a.rs] - Vec{};
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        acc[r][v] += av * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      acc[r][v] *= alpha;
#pragma GCC unroll 4
    for (int v = 0; v + 1 < NV; ++v)
      std::memcpy(cr + 16 * v, &acc[r][v], sizeof(Vec));
    store_part(cr + 16 * (NV - 1), acc[r][NV - 1], last);
  }
}

using TileFn = void (*)(
    int, int, float, Strided, const float*, int64_t, float*, int64_t, int);

template <int NV>
TileFn tile_for_rows(int R) {
  switch (R) {
    case 1:
      return tile<1, NV>;
    case 2:
      return tile<2, NV>;
    case 3:
      return tile<3, NV>;
    case 4:
      return tile<4, NV>;
    case 5:
      return tile<5, NV>;
    case 6:
      return tile<6, NV>;
    case 7:
      return tile<7, NV>;
    case 8:
      return tile<8, NV>;
    case 9:
      return tile<9, NV>;
    case 10:
      return tile<10, NV>;
    case 11:
      return tile<11, NV>;
    default:
      return tile<12, NV>;
  }
}

TileFn tile_for(int R, int NV) {
  switch (NV) {
    case 1:
      return tile_for_rows<1>(R);
    case 2:
      return tile_for_rows<2>(R);
    case 3:
      return tile_for_rows<3>(R);
    default:
      return tile_for_rows<4>(R);
  }
}

// Which part of a causal product a tile of rows [r0, r1) computes.
enum class Diag {
  kNone,
  kColumnsToRow,  // columns < r1
  kKeysToRow,     // kk < r1
  kKeysFromRow,   // kk >= r0
};

// C[M, N] = alpha * A(M x K) B[K, N], B's rows dense with stride ldb.
void product(
    int M,
    int N,
    int K,
    float alpha,
    Strided a,
    const float* b,
    int64_t ldb,
    float* c,
    int64_t ldc,
    Diag diag,
    bool threaded) {
  const int rows = N > 32 ? 6 : kCausalReach;
  const int tiles = (M + rows - 1) / rows;
  // Column blocks of 64 outer, row tiles inner: one block of B (K x 64,
  // 16 KB for a head of 64) stays in L1 while every row tile reads it;
  // with the row tiles outer each tile read all of B (64 KB at N = 256,
  // more than a 48 KB L1). Each entry of C is the same tile's, in the same
  // order, either way.
  const int blocks = (N + 63) / 64;
  parallel_for(
      threaded && tiles * blocks > 1, int64_t{tiles} * blocks, [&](int64_t i) {
        const int t = static_cast<int>(i % tiles);
        const int n0 = static_cast<int>(i / tiles) * 64;
        const int r0 = t * rows, r1 = std::min(M, r0 + rows);
        int k0 = 0, k1 = K, n1 = N;
        switch (diag) {
          case Diag::kNone:
            break;
          case Diag::kColumnsToRow:
            n1 = std::min(N, r1);
            break;
          case Diag::kKeysToRow:
            k1 = std::min(K, r1);
            break;
          case Diag::kKeysFromRow:
            k0 = std::min(K, r0);
            break;
        }
        if (n0 >= n1)
          return;
        const Strided at{a.p + r0 * a.rs, a.rs, a.ks};
        const int w = std::min(64, n1 - n0);
        const int last = w - (w - 1) / 16 * 16;
        tile_for(r1 - r0, (w + 15) / 16)(
            k0, k1, alpha, at, b + n0, ldb, c + r0 * ldc + n0, ldc, last);
      });
}

#if defined(__AVX512F__)
// 16 x 16 block transpose in registers: x[i] holds row i, returns with
// x[i] holding column i. (GCC 12's shuffle intrinsics start from an
// "undefined" register it then warns about.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline void transpose16(__m512 (&x)[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(x[i], x[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    x[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    x[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    x[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    x[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(x[i], x[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(x[i], x[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(x[i + 8], x[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(x[i + 8], x[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    x[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
}
#pragma GCC diagnostic pop
#endif

// B [N, K] (rows ldb apart) transposed into buf as [K, Np], Np >= N a
// whole number of vectors, the padding zero.
const float* pack_transposed(
    std::vector<float>& buf,
    int N,
    int64_t Np,
    int K,
    const float* B,
    int64_t ldb) {
  buf.resize(static_cast<size_t>(K) * Np);
  float* out = buf.data();
  for (int j0 = 0; j0 < N; j0 += 16) {
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int kw = std::min(16, K - k0);
#if defined(__AVX512F__)
      __m512 x[16];
      for (int i = 0; i < 16; ++i) {
        Vec row = {};
        if (j0 + i < N)
          load_part(row, B + (j0 + i) * ldb + k0, kw);
        x[i] = __m512(row);
      }
      transpose16(x);
      for (int i = 0; i < kw; ++i)
        _mm512_storeu_ps(out + (k0 + i) * Np + j0, x[i]);
#else
      for (int i = 0; i < kw; ++i)
        for (int j = 0; j < 16; ++j)
          out[(k0 + i) * Np + j0 + j] =
              j0 + j < N ? B[(j0 + j) * ldb + k0 + i] : 0.0f;
#endif
    }
  }
  return out;
}

// head_scores computes at most this many trailing columns as dot
// products: a tile of 6 rows by one vector spends 6 multiply-adds and 7
// loads per kk on them, against K / 16 vector multiply-adds and a
// reduction per entry here.
constexpr int kDotColumns = 4;

// Multiply-adds inside the causal mask of a product whose row r sees
// entries [0, min(n, r + 1)) (from_row false) or [r, n) (true) of a length-n
// dimension, the other one `width` long, times 2.
int64_t causal_flops(int rows, int n, int width, bool from_row) {
  int64_t entries = 0;
  for (int r = 0; r < rows; ++r)
    entries += from_row ? std::max(0, n - r) : std::min(n, r + 1);
  return 2 * entries * width;
}

}  // namespace

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
    bool threaded) {
  // The last few columns past a multiple of 64 (T = 65 in the benchmark
  // ViT), without the mask, as dot products instead of tiles.
  const int dots = N > 64 && !causal && N % 64 <= kDotColumns ? N % 64 : 0;
  const int tiled = N - dots;
  thread_local std::vector<float> bt_buf;
  const int64_t Np = (tiled + 15) / 16 * 16;
  const float* bt = pack_transposed(bt_buf, tiled, Np, K, B, ldb);
  product(
      M,
      tiled,
      K,
      alpha,
      Strided{A, lda, 1},
      bt,
      Np,
      C,
      ldc,
      causal ? Diag::kColumnsToRow : Diag::kNone,
      threaded);
  if (dots > 0) {
    parallel_for(threaded, M, [&](int64_t r) {
      for (int j = tiled; j < N; ++j)
        C[r * ldc + j] = alpha * dot_row(A + r * lda, B + j * ldb, K);
    });
  }
  return causal ? causal_flops(M, N, K, false) : int64_t{2} * M * N * K;
}

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
    bool threaded) {
  const Diag diag = !causal   ? Diag::kNone
                    : trans_a ? Diag::kKeysFromRow
                              : Diag::kKeysToRow;
  product(
      M,
      N,
      K,
      1.0f,
      trans_a ? Strided{A, 1, lda} : Strided{A, lda, 1},
      B,
      ldb,
      C,
      ldc,
      diag,
      threaded);
  return causal ? causal_flops(M, K, N, trans_a) : int64_t{2} * M * N * K;
}

}  // namespace ndt::ops::detail
