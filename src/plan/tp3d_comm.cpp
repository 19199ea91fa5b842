#include "plan/tp3d_comm.h"

#include "base/check.h"

namespace ndt {

Tp3dVolume operator+(const Tp3dVolume& a, const Tp3dVolume& b) {
  return {
      a.out + b.out,
      a.in + b.in,
      a.wt + b.wt,
      a.samples_a + b.samples_a,
      a.samples_b + b.samples_b};
}

Tp3dVolume linear3d_comm(
    int p,
    int64_t N,
    int64_t IC,
    int64_t OC,
    bool bias,
    bool from_side_a,
    bool need_dx) {
  const int64_t pp = int64_t(p) * p;
  NDT_CHECK(
      p >= 1 && N % pp == 0 && IC % p == 0 && OC % pp == 0,
      ConfigError,
      "linear3d_comm: N ",
      N,
      ", IC ",
      IC,
      ", OC ",
      OC,
      " do not split over a ",
      p,
      " x ",
      p,
      " x ",
      p,
      " cube");
  const int64_t x = N / pp * (IC / p), y = N / pp * (OC / p),
                w = OC / pp * (IC / p);
  Tp3dVolume v;
  PassVolume& G = from_side_a ? v.in : v.out;
  PassVolume& F = from_side_a ? v.out : v.in;
  PassVolume& out_samples = from_side_a ? v.samples_b : v.samples_a;
  G.fwd.add(OpType::kAllGather, 1, x);
  v.wt.fwd.add(OpType::kAllGather, 1, w);
  F.fwd.add(OpType::kReduceScatter, 1, y);
  F.bwd.add(OpType::kAllGather, 1, y);
  v.wt.bwd.add(OpType::kReduceScatter, 1, w);
  if (need_dx)
    G.bwd.add(OpType::kReduceScatter, 1, x);
  if (bias)
    out_samples.bwd.add(OpType::kAllReduce, 1, OC / p);
  return v;
}

Tp3dVolume layernorm3d_comm(int p, int64_t N, int64_t C) {
  const int64_t pp = int64_t(p) * p;
  NDT_CHECK(
      p >= 1 && N % pp == 0 && C % p == 0,
      ConfigError,
      "layernorm3d_comm: N ",
      N,
      ", C ",
      C,
      " do not split over a ",
      p,
      " x ",
      p,
      " x ",
      p,
      " cube");
  Tp3dVolume v;
  v.out.fwd.add(OpType::kAllReduce, 1, 2 * (N / pp), kFp64Bytes);
  v.out.bwd.add(OpType::kAllReduce, 1, 2 * (N / pp), kFp64Bytes);
  v.samples_a.bwd.add(OpType::kAllReduce, 1, 2 * (C / p));
  return v;
}

Tp3dVolume transformer_block3d_comm(int p, int64_t N, int64_t C, int64_t F) {
  return layernorm3d_comm(p, N, C) + linear3d_comm(p, N, C, 3 * C, true, true) +
         linear3d_comm(p, N, C, C, true, false) + layernorm3d_comm(p, N, C) +
         linear3d_comm(p, N, C, F, true, true) +
         linear3d_comm(p, N, F, C, true, false);
}

}  // namespace ndt
