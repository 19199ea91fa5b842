// ParamGathers (ZeRO stage 3): which buckets a forward or backward
// broadcasts before each gather unit (a module's layer; here mostly one
// per module), with the slots of assign_slots; a bucket still in its slot
// is not sent again until invalidate(). GatherUnits numbers the units.
#include <gtest/gtest.h>

#include "base/error.h"
#include "parallel/param_gathers.h"

namespace ndt {
namespace {

Bucket bucket_of(int64_t n) {
  Bucket b;
  b.params = {0};
  b.offsets = {0};
  b.numel = n;
  return b;
}

// Five modules, one bucket each, in backward order: bucket b holds module
// 4 - b. No owners: slots 0, 1, 0, 1, 0 (two modules apart).
struct FiveModules {
  std::vector<ModuleSpan> spans = {{4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}};
  std::vector<int> slot_of;
  FiveModules() {
    std::vector<Bucket> b(5, bucket_of(10));
    slot_of = assign_slots(b, spans, std::vector<int>(5, -1), 0).slot_of;
  }
};

using Lists = std::vector<std::vector<int>>;

Lists sweep(ParamGathers& g, bool forward) {
  Lists out;
  for (int k = 0; k < 5; ++k)
    out.push_back(g.before(forward ? k : 4 - k, forward));
  return out;
}

TEST(ParamGathers, FetchesOneModuleAheadAndKeepsWhatItsSlotHolds) {
  const FiveModules f;
  EXPECT_EQ(f.slot_of, (std::vector<int>{0, 1, 0, 1, 0}));
  ParamGathers g(f.spans, f.slot_of, 5);
  // Forward: module 0's bucket and module 1's; then one module ahead.
  EXPECT_EQ(sweep(g, true), (Lists{{4, 3}, {2}, {1}, {0}, {}}));
  // Backward: the head's and block 3's buckets are still in their slots.
  EXPECT_EQ(sweep(g, false), (Lists{{}, {2}, {3}, {4}, {}}));
  // The next micro-batch's forward finds modules 0 and 1 in place.
  EXPECT_EQ(sweep(g, true), (Lists{{}, {2}, {1}, {0}, {}}));
  // After an update nothing is current.
  g.invalidate();
  EXPECT_EQ(sweep(g, false), (Lists{{0, 1}, {2}, {3}, {4}, {}}));
}

TEST(ParamGathers, BucketsAcrossModules) {
  // Bucket 0 holds modules 2 and 1, bucket 1 module 0; every rank has
  // both in slots of their own.
  const std::vector<ModuleSpan> spans = {{2, 1}, {0, 0}};
  ParamGathers g(spans, {0, 1}, 3);
  EXPECT_EQ(g.of_unit(0), (std::vector<int>{1}));
  EXPECT_EQ(g.of_unit(1), (std::vector<int>{0}));
  EXPECT_EQ(g.of_unit(2), (std::vector<int>{0}));
  EXPECT_EQ(g.before(0, true), (std::vector<int>{1, 0}));
  EXPECT_EQ(g.before(1, true), (std::vector<int>{}));
  EXPECT_EQ(g.before(2, true), (std::vector<int>{}));
}

// Units: an input layer, two blocks of six layers, a head without
// parameters (it still counts as one unit).
TEST(ParamGathers, UnitsNumberEveryLayerOfEveryModule) {
  const GatherUnits u = gather_units({1, 6, 6, 0}, true);
  EXPECT_EQ(u.first, (std::vector<int>{0, 1, 7, 13}));
  EXPECT_EQ(u.count, (std::vector<int>{1, 6, 6, 1}));
  EXPECT_EQ(u.total(), 14);
  EXPECT_EQ(u.unit(2, 3), 10);
  EXPECT_EQ(u.last(1), 6);
  // Module by module (recompute).
  const GatherUnits m = gather_units({1, 6, 6, 0}, false);
  EXPECT_EQ(m.first, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(m.total(), 4);
  EXPECT_EQ(m.unit(2, 3), 2);  // every layer of a module is its unit
}

// A block's six layers in buckets of one layer each: value slots need
// only a layer's gap, so two slots serve all six (module by module, the
// buckets of one module would need a slot each).
TEST(ParamGathers, LayersShareSlotsWithinAModule) {
  std::vector<ModuleSpan> spans;
  for (int u = 5; u >= 0; --u)
    spans.push_back({u, u});
  std::vector<Bucket> b(6, bucket_of(10));
  const Slots s = assign_slots(b, spans, std::vector<int>(6, -1), 0);
  EXPECT_EQ(s.slot_of, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  ParamGathers g(spans, s.slot_of, 6);
  std::vector<std::vector<int>> fwd;
  for (int u = 0; u < 6; ++u)
    fwd.push_back(g.before(u, true));
  EXPECT_EQ(
      fwd, (std::vector<std::vector<int>>{{5, 4}, {3}, {2}, {1}, {0}, {}}));
}

TEST(ParamGathers, RefusesToEvictABucketInUse) {
  // Modules 1 and 0 share a slot: fetching module 1's while module 0 runs
  // would overwrite module 0's values.
  ParamGathers g({{1, 1}, {0, 0}}, {0, 0}, 2);
  EXPECT_THROW(g.before(0, true), Error);
}

}  // namespace
}  // namespace ndt
