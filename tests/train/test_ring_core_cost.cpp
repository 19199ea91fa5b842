// measure_ring_core_extra (train/ring_core_cost.h): the ring core against
// the serial core on a small GPT's and ViT's sequence, forward and
// backward: finite differences of plausible size (both cores take well
// under a second here).
#include <gtest/gtest.h>

#include <cmath>

#include "train/ring_core_cost.h"

namespace ndt {
namespace {

TEST(RingCoreCost, MeasuresAFiniteDifferenceForCausalAndFullAttention) {
  for (ModelKind kind : {ModelKind::kGpt, ModelKind::kVit}) {
    ModelConfig m;
    m.kind = kind;
    m.dim = 64;
    m.heads = 2;
    m.seq_len = 128;
    const RingCoreExtra e = measure_ring_core_extra(m);
    for (double s : {e.forward_s, e.backward_s}) {
      EXPECT_TRUE(std::isfinite(s)) << to_string(kind);
      EXPECT_LT(std::abs(s), 1.0) << to_string(kind);
    }
  }
}

}  // namespace
}  // namespace ndt
