#include "plan/activation_memory.h"

#include "base/check.h"
#include "tensor/memory.h"

namespace ndt {
namespace {

int64_t divide(int64_t a, int64_t b, const char* what) {
  NDT_CHECK(b > 0 && a % b == 0, ConfigError, what, ": ", a, " over ", b);
  return a / b;
}

}  // namespace

std::vector<int64_t> block_activation_tensors(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples) {
  NDT_CHECK(
      parallel.sp == 1,
      ConfigError,
      "the plan's activation model does not cover sequence parallelism "
      "(parallel.sp=",
      parallel.sp,
      ")");
  const int64_t T = shape.tokens_per_sample, N = samples * T;
  const int64_t C = shape.dim, F = shape.mlp_dim, H = heads;
  const int tp = shape.tp;
  std::vector<int64_t> t;
  if (tp == 1 || shape.tp_mode == TpMode::k1d) {
    const int64_t c = divide(C, tp, "width"), f = divide(F, tp, "MLP");
    const int64_t P = samples * divide(H, tp, "heads") * T * T;
    if (!parallel.tp_seq || tp == 1) {
      // h1, h, h2, y [N, C]; stats; qkv, P, attention out, fc1 x2.
      t = {N * C, N * C, N * C, N * C, N, N, N, N};
    } else {
      // h and y on my tokens; h1, h2 all-gathered for the column linears.
      const int64_t n = divide(N, tp, "tokens");
      t = {N * C, n * C, N * C, n * C, n, n, n, n};
    }
    for (int64_t x : {N * 3 * c, P, N * c, N * f, N * f})
      t.push_back(x);
    return t;
  }
  const int q = shape.tp_side;
  if (shape.tp_mode == TpMode::k3d) {
    const int64_t p = q, pp = int64_t{q} * q;
    const int64_t r = divide(N, pp, "rows"), c = C / p, f = F / p;
    const int64_t P =
        divide(samples, pp, "samples") * divide(H, p, "heads") * T * T;
    // X' of qkv, proj, fc1 and fc2 with their W'; stats; qkv out, P,
    // h, fc1 before GELU, y.
    return {p * r * c, 3 * C / p * c, p * r * c, C / p * c, p * r * c,
            F / p * c, p * r * f, C / p * f, r,     r,
            r,         r,         r * 3 * c, P,     r * c,
            r * f,     r * c};
  }
  const int64_t d = shape.tp_mode == TpMode::k2p5d ? parallel.tp_depth : 1;
  const int64_t r = divide(N, q * d, "rows"), c = C / q, f = F / q;
  const int64_t P =
      divide(samples, q * d, "samples") * divide(H, q, "heads") * T * T;
  // h1, h, h2, y; stats; qkv, P, attention out, fc1 x2.
  return {r * c, r * c, r * c, r * c, r, r, r, r,
          r * 3 * c, P, r * c, r * f, r * f};
}

int64_t block_activation_bytes(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples) {
  int64_t bytes = 0;
  for (int64_t n : block_activation_tensors(shape, parallel, heads, samples))
    bytes += static_cast<int64_t>(mem_block_bytes(4 * size_t(n)));
  return bytes;
}

}  // namespace ndt
