#include "plan/tp2d_comm.h"

#include "base/check.h"

namespace ndt {

Tp2dVolume linear2d_comm(
    int q, int64_t N, int64_t IC, int64_t OC, bool bias, bool need_dx) {
  NDT_CHECK(
      q >= 1 && N % q == 0 && IC % q == 0 && OC % q == 0 &&
          (!bias || OC % (int64_t(q) * q) == 0),
      ConfigError,
      "linear2d_comm: N ",
      N,
      ", IC ",
      IC,
      ", OC ",
      OC,
      " do not split over a ",
      q,
      " x ",
      q,
      " grid");
  const int64_t x = N / q * (IC / q), w = OC / q * (IC / q);
  Tp2dVolume v;
  v.row.fwd.add(OpType::kBroadcast, q, x);
  v.col.fwd.add(OpType::kBroadcast, q, w);
  v.row.bwd.add(OpType::kBroadcast, q, x);
  v.col.bwd.add(OpType::kReduce, q, w);
  if (need_dx) {
    v.col.bwd.add(OpType::kBroadcast, q, w);
    v.row.bwd.add(OpType::kReduce, q, x);
  }
  if (bias) {
    v.col.fwd.add(OpType::kAllGather, 1, OC / q / q);
    v.col.bwd.add(OpType::kReduceScatter, 1, OC / q / q);
  }
  return v;
}

Tp2dVolume layernorm2d_comm(int q, int64_t N, int64_t C) {
  NDT_CHECK(
      q >= 1 && N % q == 0 && C % (int64_t(q) * q) == 0,
      ConfigError,
      "layernorm2d_comm: N ",
      N,
      ", C ",
      C,
      " do not split over a ",
      q,
      " x ",
      q,
      " grid");
  Tp2dVolume v;
  v.row.fwd.add(OpType::kAllReduce, 1, 2 * (N / q), kFp64Bytes);
  v.col.fwd.add(OpType::kAllGather, 2, C / q / q);
  v.row.bwd.add(OpType::kAllReduce, 1, 2 * (N / q), kFp64Bytes);
  v.col.bwd.add(OpType::kReduceScatter, 2, C / q / q);
  return v;
}

Tp2dVolume operator+(const Tp2dVolume& a, const Tp2dVolume& b) {
  return {a.row + b.row, a.col + b.col};
}

Tp2dVolume transformer_block2d_comm(int q, int64_t N, int64_t C, int64_t F) {
  return layernorm2d_comm(q, N, C) + linear2d_comm(q, N, C, 3 * C, true) +
         linear2d_comm(q, N, C, C, true) + layernorm2d_comm(q, N, C) +
         linear2d_comm(q, N, C, F, true) + linear2d_comm(q, N, F, C, true);
}

}  // namespace ndt
