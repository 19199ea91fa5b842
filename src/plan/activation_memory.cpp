#include "plan/activation_memory.h"

#include <initializer_list>

#include "base/check.h"
#include "plan/divide.h"
#include "tensor/memory.h"

namespace ndt {

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
  const auto add = [&t](std::initializer_list<int64_t> sizes) {
    for (int64_t n : sizes)
      t.push_back(n);
  };
  if (tp == 1 || shape.tp_mode == TpMode::k1d) {
    const int64_t c = divide(C, tp, "width"), f = divide(F, tp, "MLP");
    const int64_t P = samples * divide(H, tp, "heads") * T * T;
    // h and y on my tokens under tp_seq; h1 and h2 all-gathered there.
    const int64_t n = parallel.tp_seq && tp > 1 ? divide(N, tp, "tokens") : N;
    add({N * C, n * C, N * C, n * C});         // h1, h, h2, y
    add({n, n, n, n});                         // LayerNorm stats
    add({N * 3 * c, P, N * c, N * f, N * f});  // qkv, P, attn, fc1 x2
    return t;
  }
  const int q = shape.tp_side;
  if (shape.tp_mode == TpMode::k3d) {
    const int64_t p = q, pp = int64_t{q} * q;
    const int64_t r = divide(N, pp, "rows"), c = C / p, f = F / p;
    const int64_t P =
        divide(samples, pp, "samples") * divide(H, p, "heads") * T * T;
    add({p * r * c, 3 * C / p * c});           // qkv's X', W'
    add({p * r * c, C / p * c});               // proj's
    add({p * r * c, F / p * c});               // fc1's
    add({p * r * f, C / p * f});               // fc2's
    add({r, r, r, r});                         // LayerNorm stats
    add({r * 3 * c, P, r * c, r * f, r * c});  // qkv, P, h, fc1 pre, y
    return t;
  }
  const int64_t d = shape.tp_mode == TpMode::k2p5d ? parallel.tp_depth : 1;
  const int64_t r = divide(N, q * d, "rows"), c = C / q, f = F / q;
  const int64_t P =
      divide(samples, q * d, "samples") * divide(H, q, "heads") * T * T;
  add({r * c, r * c, r * c, r * c});         // h1, h, h2, y
  add({r, r, r, r});                         // LayerNorm stats
  add({r * 3 * c, P, r * c, r * f, r * f});  // qkv, P, attn, fc1 x2
  return t;
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
