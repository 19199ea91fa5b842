// Table lookup (token / position embeddings) and ViT patch extraction.
//
//   ids     int32 [N], each in [0, V)
//   table   [V, C], dtable [V, C] (accumulated +=)
//   y, dy   [N, C]
//   images  [B, Cin, H, W], dimages same (assigned); H, W multiples of P
//   patches [B, (H/P)*(W/P), Cin*P*P]; patch (ph, pw) is row ph*(W/P)+pw,
//           flattened in (c, py, px) order to match a Conv2d weight viewed
//           [D, Cin*P*P].
#include <omp.h>

#include <cstring>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

// An id outside [0, V) is a data problem (tokenizer and vocabulary
// disagree), so it is a DataError, raised before any thread starts.
void check_ids(const int32_t* ids, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    NDT_CHECK(
        ids[n] >= 0 && ids[n] < V,
        DataError,
        "embedding: id ",
        ids[n],
        " at index ",
        n,
        " is outside the table range [0, ",
        V,
        ")");
  }
}

struct PatchDims {
  int64_t B, Cin, H, W, P, GH, GW, D;
};

PatchDims patch_dims(const Tensor& images, const Tensor& patches, int P) {
  NDT_ASSERT(
      images.ndim() == 4 && P > 0,
      "patchify images ",
      shape_str(images.shape()),
      " P ",
      P);
  PatchDims d{};
  d.B = images.dim(0);
  d.Cin = images.dim(1);
  d.H = images.dim(2);
  d.W = images.dim(3);
  d.P = P;
  NDT_ASSERT(
      d.H % P == 0 && d.W % P == 0,
      "patchify image ",
      d.H,
      "x",
      d.W,
      " not divisible by patch size ",
      P);
  d.GH = d.H / P;
  d.GW = d.W / P;
  d.D = d.Cin * P * P;
  NDT_ASSERT(
      patches.numel() == d.B * d.GH * d.GW * d.D,
      "patchify patches ",
      shape_str(patches.shape()),
      " for images ",
      shape_str(images.shape()),
      " P ",
      P);
  return d;
}

}  // namespace

void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table) {
  NDT_ASSERT(table.ndim() == 2, "embedding table ", shape_str(table.shape()));
  const int64_t V = table.dim(0), C = table.dim(1), N = ids.numel();
  NDT_ASSERT(
      y.numel() == N * C,
      "embedding y ",
      shape_str(y.shape()),
      " for ",
      N,
      " ids and table ",
      shape_str(table.shape()));
  const int32_t* ip = ids.data_i32();
  check_ids(ip, N, V);
  const float* tp = table.data();
  float* yp = y.data();
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(
        yp + n * C, tp + static_cast<int64_t>(ip[n]) * C, sizeof(float) * C);
  }
}

void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  NDT_ASSERT(
      dtable.ndim() == 2, "embedding dtable ", shape_str(dtable.shape()));
  const int64_t V = dtable.dim(0), C = dtable.dim(1), N = ids.numel();
  NDT_ASSERT(
      dy.numel() == N * C,
      "embedding dy ",
      shape_str(dy.shape()),
      " for ",
      N,
      " ids and table ",
      shape_str(dtable.shape()));
  const int32_t* ip = ids.data_i32();
  check_ids(ip, N, V);
  const float* g = dy.data();
  float* dt = dtable.data();
  // Repeated ids make a row-parallel scatter racy; instead each thread owns
  // a stripe of columns and adds rows in row order, so the sums are the same
  // for any thread count.
  const int64_t W = detail::column_block_width(C, omp_get_max_threads());
  const int64_t blocks = (C + W - 1) / W;
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * W;
    const int64_t w = C - c0 < W ? C - c0 : W;
    for (int64_t n = 0; n < N; ++n) {
      float* dst = dt + static_cast<int64_t>(ip[n]) * C + c0;
      const float* src = g + n * C + c0;
      for (int64_t j = 0; j < w; ++j)
        dst[j] += src[j];
    }
  }
}

void patchify_forward(Tensor& patches, const Tensor& images, int P) {
  const PatchDims d = patch_dims(images, patches, P);
  const float* ip = images.data();
  float* pp = patches.data();
  const bool threaded = images.numel() >= detail::kMinParallelWork;
#pragma omp parallel for collapse(2) schedule(static) if (threaded)
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t gy = 0; gy < d.GH; ++gy) {
      for (int64_t gx = 0; gx < d.GW; ++gx) {
        float* dst = pp + ((b * d.GH + gy) * d.GW + gx) * d.D;
        for (int64_t c = 0; c < d.Cin; ++c) {
          for (int64_t py = 0; py < P; ++py) {
            const float* src =
                ip + ((b * d.Cin + c) * d.H + gy * P + py) * d.W + gx * P;
            std::memcpy(dst + (c * P + py) * P, src, sizeof(float) * P);
          }
        }
      }
    }
  }
}

void patchify_backward(Tensor& dimages, const Tensor& dpatches, int P) {
  const PatchDims d = patch_dims(dimages, dpatches, P);
  const float* pp = dpatches.data();
  float* ip = dimages.data();
  // Patches tile the image exactly, so col2im is a permutation: every
  // element of dimages is assigned once.
  const bool threaded = dimages.numel() >= detail::kMinParallelWork;
#pragma omp parallel for collapse(2) schedule(static) if (threaded)
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t gy = 0; gy < d.GH; ++gy) {
      for (int64_t gx = 0; gx < d.GW; ++gx) {
        const float* src = pp + ((b * d.GH + gy) * d.GW + gx) * d.D;
        for (int64_t c = 0; c < d.Cin; ++c) {
          for (int64_t py = 0; py < P; ++py) {
            float* dst =
                ip + ((b * d.Cin + c) * d.H + gy * P + py) * d.W + gx * P;
            std::memcpy(dst, src + (c * P + py) * P, sizeof(float) * P);
          }
        }
      }
    }
  }
}

}  // namespace ndt::ops
