// Layout search (plan/layout_search.h): the candidates of a number of
// ranks, the alpha-beta cost of a group's volume, and the ranking's
// response to the machine: a free link leaves only compute and the
// pipeline's bubble, a slow link favours the layouts that communicate
// least, and memory per rank falls with the ZeRO stage (and the
// activations with 1D's sequence-split regions).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "base/error.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/verify.h"
#include "plan/layout_search.h"
#include "plan/rank_memory.h"

namespace ndt {
namespace {

const std::string kGpt =
    std::string(NDT_SOURCE_DIR) + "/configs/verify/gpt.yaml";

std::set<std::string> names(const std::vector<LayoutCost>& v) {
  std::set<std::string> out;
  for (const LayoutCost& c : v)
    out.insert(c.name);
  return out;
}

const LayoutCost& find(const std::vector<LayoutCost>& v, const std::string& n) {
  for (const LayoutCost& c : v) {
    if (c.name == n)
      return c;
  }
  ADD_FAILURE() << "no layout " << n;
  return v.front();
}

TEST(LayoutSearch, CommSecondsFollowTheAlphaBetaFormulas) {
  const LinkCost link{1e-6, 1e-9};  // 1 us per step, 1 GB/s
  CommVolume v;
  v.add(OpType::kAllReduce, 2, 1000);  // 8000 bytes in 2 calls
  // 2 calls x 2 (4 - 1) x 1 us + 2 (4 - 1) / 4 x 8000 B x 1 ns.
  EXPECT_DOUBLE_EQ(comm_seconds(v, 4, link), 12e-6 + 12e-6);
  CommVolume g;
  g.add(OpType::kAllGather, 1, 250);  // one rank's block: 1000 bytes
  EXPECT_DOUBLE_EQ(comm_seconds(g, 4, link), 3e-6 + 3e-6);
  CommVolume b;
  b.add(OpType::kBroadcast, 3, 500);  // 6000 bytes, chains of 3 steps
  EXPECT_DOUBLE_EQ(comm_seconds(b, 4, link), 9e-6 + 6e-6);
  CommVolume p;
  p.add(OpType::kSend, 2, 100);
  p.add(OpType::kRecv, 2, 100);  // the sender's cost
  EXPECT_DOUBLE_EQ(comm_seconds(p, 2, link), 2e-6 + 0.8e-6);
  EXPECT_EQ(comm_seconds(v, 1, link), 0);
}

TEST(LayoutSearch, CandidatesCoverEveryFactorisationAndMode) {
  const Config base = load_config(kGpt, {});
  auto has = [](const std::vector<std::vector<std::string>>& c,
                const std::vector<std::string>& want) {
    return std::any_of(c.begin(), c.end(), [&](const auto& l) {
      return std::all_of(want.begin(), want.end(), [&](const std::string& w) {
        return std::find(l.begin(), l.end(), w) != l.end();
      });
    });
  };
  const auto c8 = layout_candidates(base, 8);
  EXPECT_TRUE(has(c8, {"parallel.dp=8", "parallel.zero=3"}));
  EXPECT_TRUE(has(c8, {"parallel.tp=8", "parallel.tp_mode=3d"}));
  EXPECT_TRUE(has(
      c8, {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}));
  EXPECT_FALSE(has(c8, {"parallel.tp=8", "parallel.tp_mode=2d"}));
  EXPECT_TRUE(
      has(c8, {"parallel.dp=2", "parallel.tp=4", "parallel.tp_mode=2d"}));
  EXPECT_TRUE(
      has(c8,
          {"parallel.pp=2",
           "parallel.sp=2",
           "parallel.dp=2",
           "parallel.microbatches=4"}));
  // ZeRO only where a gradient sync has more than one rank: tp=8 in 1d
  // has none, 2.5d's depth is one.
  EXPECT_FALSE(
      has(c8, {"parallel.tp_mode=1d", "parallel.tp=8", "parallel.zero=1"}));
  EXPECT_TRUE(has(c8, {"parallel.tp_mode=2.5d", "parallel.zero=1"}));
  // 1D with its sequence-split regions, also inside sequence parallelism;
  // sequence parallelism inside every other mode.
  EXPECT_TRUE(
      has(c8,
          {"parallel.tp=2",
           "parallel.tp_mode=1d",
           "parallel.tp_seq=true",
           "parallel.sp=2"}));
  EXPECT_TRUE(
      has(c8, {"parallel.tp=4", "parallel.tp_mode=2d", "parallel.sp=2"}));
  EXPECT_THROW(layout_candidates(base, 0), ConfigError);
}

// Pipelines also run interleaved over 2 chunks per rank where the blocks
// allow: a smaller bubble for the same compute.
TEST(LayoutSearch, InterleavedPipelinesWhereTheBlocksAllow) {
  const auto interleaved_offered = [](const Config& c) {
    for (const auto& l : layout_candidates(c, 2)) {
      if (std::find(l.begin(), l.end(), "parallel.schedule=interleaved") !=
          l.end()) {
        EXPECT_NE(
            std::find(l.begin(), l.end(), "parallel.pp_chunks=2"), l.end());
        return true;
      }
    }
    return false;
  };
  // 2 blocks: one per stage at pp=2; 4: two chunks of one.
  EXPECT_FALSE(interleaved_offered(load_config(kGpt, {})));
  EXPECT_TRUE(interleaved_offered(load_config(kGpt, {"model.depth=4"})));
  MachineCost m;
  m.gflops = 100;  // a free link
  const auto all = search_layouts(kGpt, {"model.depth=4"}, 2, {1e9}, m);
  const LayoutCost& one = find(all, "pp=2 (microbatches=4)");
  const LayoutCost& two = find(all, "pp=2 (microbatches=4, 2 chunks)");
  EXPECT_DOUBLE_EQ(
      one.bubble,
      verify_schedule(make_schedule(PipeSchedule::kOneFOneB, 2, 4)).bubble);
  EXPECT_DOUBLE_EQ(
      two.bubble,
      verify_schedule(make_schedule(PipeSchedule::kInterleaved, 2, 4, 2))
          .bubble);
  EXPECT_LT(two.bubble, one.bubble);
  EXPECT_LT(two.step_s, one.step_s);
  EXPECT_GT(two.act_bytes, 0);
}

TEST(LayoutSearch, AFreeLinkLeavesComputeAndTheBubble) {
  MachineCost m;
  m.gflops = 100;  // link: alpha = beta = 0
  int rejected = -1;
  const auto all = search_layouts(kGpt, {}, 4, {1e9}, m, &rejected);
  ASSERT_FALSE(all.empty());
  EXPECT_GT(rejected, 0);  // e.g. tp=4 in 3d: 4 is not a cube
  // Every layout without a pipeline runs the same compute: 16 samples x
  // 1 GFLOP / 4 ranks / 100 GFLOP/s; a pipeline adds its bubble.
  for (const LayoutCost& c : all) {
    const bool pipe = c.name.find("pp=") != std::string::npos;
    EXPECT_EQ(c.sync_comm_s + c.other_comm_s, 0) << c.name;
    if (!pipe) {
      EXPECT_NEAR(c.step_s, 16 * 1e9 / 4 / 100e9, 1e-12) << c.name;
    } else {
      EXPECT_GT(c.bubble, 0) << c.name;
      EXPECT_NEAR(c.step_s, c.compute_s, 1e-12);
      EXPECT_GT(c.step_s, 16 * 1e9 / 4 / 100e9) << c.name;
    }
  }
  // Ties go to less memory per rank (state and modelled activations).
  auto bytes = [](const LayoutCost& c) {
    return c.state_bytes + std::max<int64_t>(c.act_bytes, 0);
  };
  for (const LayoutCost& c : all) {
    if (c.step_s == all.front().step_s) {
      EXPECT_LE(bytes(all.front()), bytes(c)) << c.name;
    }
  }
  // No recompute FLOPs here: the tie goes to the smallest activations.
  EXPECT_EQ(all.front().name, "tp=4 (2d) recompute");
  EXPECT_TRUE(names(all).count("tp=2 (1d) sp=2"));
  EXPECT_TRUE(names(all).count("dp=2 tp=2 (1d)"));
  EXPECT_TRUE(names(all).count("tp=4 (2d)"));
  EXPECT_TRUE(names(all).count("dp=2 pp=2 (microbatches=2)"));
}

TEST(LayoutSearch, ASlowLinkFavoursTheLayoutsThatCommunicateLeast) {
  MachineCost fast, slow;
  fast.gflops = slow.gflops = 100;
  fast.link = {1e-6, 1e-10};
  slow.link = {1e-3, 1e-7};
  const auto f = search_layouts(kGpt, {}, 2, {1e9}, fast, nullptr);
  const auto s = search_layouts(kGpt, {}, 2, {1e9}, slow, nullptr);
  // Tensor parallelism exchanges activations in every layer; with a slow
  // link it falls behind data parallelism (whose sync also overlaps the
  // backward) and the pipeline (one activation per micro-batch).
  const LayoutCost& tp = find(s, "tp=2 (1d)");
  const LayoutCost& dp = find(s, "dp=2");
  EXPECT_GT(tp.other_comm_s, dp.other_comm_s);
  EXPECT_GT(tp.step_s, dp.step_s);
  EXPECT_NE(s.front().name, "tp=2 (1d)");
  // The same layouts cost more on the slow link, never less.
  for (const LayoutCost& c : s)
    EXPECT_GE(c.step_s, find(f, c.name).step_s) << c.name;
}

// Without ZeRO stage 2 or 3 only the step's last backward communicates,
// so with accumulation the sync has a shorter backward to hide behind.
TEST(LayoutSearch, AccumulationShortensTheSyncsWindow) {
  MachineCost m;
  m.gflops = 1;
  m.link = {0, 5e-8};  // 20 MB/s
  auto cost = [&](int microbatches, int zero) {
    return layout_cost(
        load_config(
            kGpt,
            {"parallel.dp=2",
             "parallel.bucket_mb=0.01",
             "parallel.microbatches=" + std::to_string(microbatches),
             "parallel.zero=" + std::to_string(zero)}),
        {2e6},  // 16 x 2 MFLOP / 2 ranks / 1 GFLOP/s: 16 ms of compute
        m);
  };
  const LayoutCost one = cost(1, 0), four = cost(4, 0), four2 = cost(4, 2);
  EXPECT_DOUBLE_EQ(one.compute_s, 0.016);
  // The sync (a few ms) fits one micro-batch's 10.7 ms of backward but
  // for its last bucket, which starts when backward ends: the first
  // block's first LayerNorm (64 elements) and the embeddings (32 x 32
  // positions, 256 x 32 tokens), 9280 elements (a parameter is never
  // split, so the bucket is larger than bucket_mb), all-reduced over 2
  // ranks in 1.86 ms. With four micro-batches, 2.7 ms of backward
  // hide less of it.
  ASSERT_GT(one.sync_comm_s, 0.004);
  ASSERT_LT(one.sync_comm_s, 0.010);
  EXPECT_NEAR(
      one.step_s,
      one.compute_s + one.other_comm_s + 2 * 0.5 * 9280 * 4 * 5e-8,
      1e-12);
  EXPECT_DOUBLE_EQ(four.sync_comm_s, one.sync_comm_s);
  EXPECT_NEAR(
      four.step_s,
      four.compute_s + four.other_comm_s + four.sync_comm_s - 0.016 * 2 / 3 / 4,
      1e-12);
  // Stage 2 reduces every micro-batch: four reduces and a broadcast of
  // the buckets, at half their bytes each way (two ranks), against the
  // all-reduce's bytes: 2.5 times the volume, hidden behind all four
  // backwards.
  EXPECT_NEAR(four2.sync_comm_s, 2.5 * one.sync_comm_s, 1e-12);
}

// ZeRO stages 1 and 2 broadcast the updated values after the step; with
// parallel.defer_broadcast they run into the next step's first forward,
// and only what outlasts it counts (nothing hides on the ranks' cores).
TEST(LayoutSearch, DeferredBroadcastsHideBehindTheNextForward) {
  MachineCost m;
  m.gflops = 1;
  m.link = {0, 5e-8};  // 20 MB/s
  auto cost = [&](int zero, bool defer, bool cores) {
    m.comm_on_cores = cores;
    return layout_cost(
        load_config(
            kGpt,
            {"parallel.dp=2",
             "parallel.bucket_mb=0.01",
             "parallel.zero=" + std::to_string(zero),
             std::string("parallel.defer_broadcast=") +
                 (defer ? "true" : "false")}),
        {2e6},  // 16 ms of compute per rank, 5.3 ms of it the forward
        m);
  };
  for (int zero : {1, 2}) {
    const LayoutCost now = cost(zero, false, false);
    const LayoutCost deferred = cost(zero, true, false);
    // Two ranks, no latency: the broadcast moves as many bytes as the
    // reduce, half of the sync.
    const double broadcast_s = now.sync_comm_s / 2;
    ASSERT_GT(broadcast_s, 0.001) << zero;
    EXPECT_NEAR(
        now.step_s - deferred.step_s, std::min(broadcast_s, 0.016 / 3), 1e-12)
        << zero;
    EXPECT_DOUBLE_EQ(
        cost(zero, true, true).step_s, cost(zero, false, true).step_s)
        << zero;
  }
  // Nothing to defer without ZeRO's broadcast.
  EXPECT_DOUBLE_EQ(cost(0, true, false).step_s, cost(0, false, false).step_s);
}

// On two ranks ZeRO's reduces and broadcasts go both ways at once (one
// lane per owner), so without latency stages 1 and 2 sync as fast as the
// all-reduce (bytes beta); on four ranks each chain carries all the bytes
// (2 bytes beta against the ring's 1.5). Buckets of 0.005 MiB, below
// ZeRO's limit for 4 owners (a sixteenth of the 21760 parameters), so
// both sizes cut the same buckets and stage 3 gathers the same.
TEST(LayoutSearch, TwoOwnersUseBothDirectionsOfTheLink) {
  MachineCost m;
  m.gflops = 1;
  m.link = {0, 5e-8};
  auto sync_s = [&](int dp, int zero) {
    return layout_cost(
               load_config(
                   kGpt,
                   {"parallel.dp=" + std::to_string(dp),
                    "parallel.zero=" + std::to_string(zero),
                    "parallel.bucket_mb=0.005"}),
               {2e6},
               m)
        .sync_comm_s;
  };
  ASSERT_GT(sync_s(2, 0), 0.001);
  for (int zero : {1, 2, 3}) {
    EXPECT_NEAR(sync_s(4, zero), 2 * sync_s(2, zero), 1e-12) << zero;
    if (zero < 3) {  // stage 3 also gathers before forward and backward
      EXPECT_NEAR(sync_s(2, zero), sync_s(2, 0), 1e-12) << zero;
    }
  }
  EXPECT_NEAR(sync_s(4, 0), 1.5 * sync_s(2, 0), 1e-12);
}

// With hosts of 2 ranks (ranks fill hosts in mesh order, the last axis
// fastest), a group with ranks on both hosts costs at the host link, the
// others at the link within a host: dp=4 and sp=4 all at the host link;
// dp=2 x tp=2 its tp pairs within a host, its dp pairs (the sync, the
// loss) across; pp=2 x tp=2 and 2D's grid partly across.
TEST(LayoutSearch, GroupsOnTwoHostsUseTheHostLink) {
  MachineCost fast;
  fast.gflops = 100;
  fast.link = {2e-6, 1e-10};
  MachineCost slow = fast;
  slow.link = {30e-6, 8e-10};
  MachineCost hosts = fast;
  hosts.host_of = hosts_in_blocks(4, 2);
  hosts.host_link = slow.link;
  const std::vector<std::string> buckets = {"parallel.bucket_mb=0.01"};
  auto at = [&](const MachineCost& m) {
    return search_layouts(kGpt, buckets, 4, {1e9}, m, nullptr);
  };
  const auto f = at(fast), sl = at(slow), h = at(hosts);
  for (const char* n : {"dp=4", "sp=4"})
    EXPECT_DOUBLE_EQ(find(h, n).step_s, find(sl, n).step_s) << n;
  const std::string mixed = "dp=2 tp=2 (1d)";
  EXPECT_DOUBLE_EQ(find(h, mixed).sync_comm_s, find(sl, mixed).sync_comm_s);
  EXPECT_GT(find(sl, mixed).sync_comm_s, find(f, mixed).sync_comm_s);
  for (const std::string& n :
       {mixed,
        std::string("pp=2 (microbatches=2) tp=2 (1d)"),
        std::string("tp=4 (2d)")}) {
    EXPECT_GT(find(h, n).other_comm_s, find(f, n).other_comm_s) << n;
    EXPECT_LT(find(h, n).other_comm_s, find(sl, n).other_comm_s) << n;
  }
  // One host of 4 ranks is the plain model.
  MachineCost one = fast;
  one.host_of = hosts_in_blocks(4, 4);
  one.host_link = slow.link;
  const auto o = at(one);
  ASSERT_EQ(o.size(), f.size());
  for (size_t i = 0; i < o.size(); ++i) {
    EXPECT_EQ(o[i].name, f[i].name);
    EXPECT_DOUBLE_EQ(o[i].step_s, f[i].step_s) << o[i].name;
  }
  // A sync across hosts overlaps backward; with comm_on_cores nothing
  // does, on hosts too.
  const LayoutCost& overlapped = find(h, mixed);
  EXPECT_LT(
      overlapped.step_s,
      overlapped.compute_s + overlapped.other_comm_s + overlapped.sync_comm_s -
          1e-6);
  MachineCost cores = hosts;
  cores.comm_on_cores = true;
  const auto on_cores = at(cores);
  const LayoutCost& full = find(on_cores, mixed);
  EXPECT_NEAR(
      full.step_s,
      full.compute_s + full.other_comm_s + full.sync_comm_s,
      1e-12);
}

// Hosts as mpirun places ranks: by slot (blocks in rank order) or by node
// (alternating). Alternating, dp=2 x tp=2 puts each tp pair (consecutive
// ranks) on two hosts and each dp pair on one: the sync at the link
// within a host, the tensor-parallel traffic at the host link; by slot
// the other way round.
TEST(LayoutSearch, EachRanksHostDecidesWhichGroupsCross) {
  EXPECT_EQ(hosts_in_blocks(4, 2), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(host_ids({"h0", "h1", "h0", "h1"}), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(host_ids({"b", "b", "a"}), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(host_count({}), 1);
  EXPECT_EQ(host_count({0, 1, 0, 1}), 2);
  EXPECT_EQ(describe_hosts({}), "one host");
  EXPECT_EQ(describe_hosts({0, 0, 0}), "one host");
  EXPECT_EQ(describe_hosts({0, 0, 1, 1}), "2 hosts of 2 ranks");
  EXPECT_EQ(describe_hosts({0, 1, 0, 1}), "2 hosts (ranks 0 2 | 1 3)");
  EXPECT_EQ(describe_hosts({0, 0, 0, 1}), "2 hosts (ranks 0 1 2 | 3)");
  MachineCost fast;
  fast.gflops = 100;
  fast.link = {2e-6, 1e-10};
  fast.host_link = {30e-6, 8e-10};
  MachineCost by_slot = fast, by_node = fast, slow = fast;
  by_slot.host_of = {0, 0, 1, 1};
  by_node.host_of = {0, 1, 0, 1};
  slow.link = fast.host_link;
  const std::vector<std::string> buckets = {"parallel.bucket_mb=0.01"};
  auto at = [&](const MachineCost& m) {
    return search_layouts(kGpt, buckets, 4, {1e9}, m, nullptr);
  };
  const auto f = at(fast), s = at(slow), slot = at(by_slot), node = at(by_node);
  const std::string mixed = "dp=2 tp=2 (1d)";
  EXPECT_DOUBLE_EQ(find(slot, mixed).sync_comm_s, find(s, mixed).sync_comm_s);
  EXPECT_DOUBLE_EQ(find(node, mixed).sync_comm_s, find(f, mixed).sync_comm_s);
  EXPECT_DOUBLE_EQ(
      find(slot, mixed).other_comm_s - find(f, mixed).other_comm_s,
      find(s, mixed).other_comm_s - find(node, mixed).other_comm_s);
  EXPECT_GT(find(node, mixed).other_comm_s, find(slot, mixed).other_comm_s);
  // A host list of another size than the layout's ranks is refused.
  MachineCost three = fast;
  three.host_of = {0, 0, 1};
  EXPECT_THROW(at(three), ConfigError);
}

// Sequence parallelism's ring core costs each rank its share of the
// measured extra: its layers and samples, 1/sp of the sequence, its heads;
// under recompute its forward twice.
TEST(LayoutSearch, TheRingCoreAddsItsExtraToEachRanksCompute) {
  MachineCost m;
  m.gflops = 100;  // link: alpha = beta = 0
  const auto plain = search_layouts(kGpt, {}, 4, {1e9}, m, nullptr);
  m.ring_extra_forward_s = 0.4e-3;
  m.ring_extra_backward_s = 0.6e-3;
  const auto ring = search_layouts(kGpt, {}, 4, {1e9}, m, nullptr);
  const auto ulysses = search_layouts(
      kGpt, {"parallel.sp_attention=ulysses"}, 4, {1e9}, m, nullptr);
  auto extra = [&](const std::vector<LayoutCost>& v, const std::string& n) {
    return find(v, n).compute_s - find(plain, n).compute_s;
  };
  // The verify GPT: 2 blocks, 16 samples.
  EXPECT_NEAR(extra(ring, "sp=4"), 1e-3 * 2 * 16 / 4, 1e-12);
  EXPECT_NEAR(extra(ring, "dp=2 sp=2"), 1e-3 * 2 * 8 / 2, 1e-12);
  // 1D splits the heads over tp.
  EXPECT_NEAR(extra(ring, "tp=2 (1d) sp=2"), 1e-3 * 2 * 16 / (2 * 2), 1e-12);
  EXPECT_NEAR(extra(ring, "sp=4 recompute"), 1.4e-3 * 2 * 16 / 4, 1e-12);
  EXPECT_NEAR(
      find(ring, "sp=4").step_s - find(plain, "sp=4").step_s,
      extra(ring, "sp=4"),
      1e-12);
  // Other layouts and the other cores: nothing.
  EXPECT_EQ(extra(ring, "dp=4"), 0);
  EXPECT_EQ(extra(ring, "tp=4 (2d)"), 0);
  m.ring_extra_forward_s = m.ring_extra_backward_s = 0;
  const auto ulysses0 = search_layouts(
      kGpt, {"parallel.sp_attention=ulysses"}, 4, {1e9}, m, nullptr);
  EXPECT_EQ(
      find(ulysses, "dp=2 sp=2").compute_s,
      find(ulysses0, "dp=2 sp=2").compute_s);
}

TEST(LayoutSearch, MemoryFallsWithTheZeroStage) {
  MachineCost m;
  m.gflops = 100;
  // Six blocks: the slots of stages 2 and 3 hold less than the model.
  const std::vector<std::string> six = {
      "parallel.bucket_mb=0.01", "model.depth=6"};
  const auto all = search_layouts(kGpt, six, 4, {1e9}, m, nullptr);
  int64_t last = 0;
  for (int z = 0; z <= 3; ++z) {
    const LayoutCost& c =
        find(all, z == 0 ? "dp=4" : "dp=4 zero=" + std::to_string(z));
    if (z > 0) {
      EXPECT_LT(c.state_bytes, last) << c.name;
    }
    last = c.state_bytes;
    // The largest rank's state, as rank_memory gives it.
    std::vector<std::string> l = six;
    l.push_back("parallel.dp=4");
    l.push_back("parallel.zero=" + std::to_string(z));
    const Config cfg = load_config(kGpt, l);
    int64_t most = 0;
    for (int r = 0; r < 4; ++r)
      most = std::max(most, rank_memory(cfg, 0, r).bytes());
    EXPECT_EQ(c.state_bytes, most) << c.name;
  }
  // The GPT's activation peak is modelled, on one stage and in a
  // pipeline (its first stage holds two micro-batches of half the
  // blocks).
  EXPECT_GT(find(all, "dp=4").act_bytes, 0);
  EXPECT_GT(find(all, "dp=2 pp=2 (microbatches=2)").act_bytes, 0);
  // 1D's sequence-split regions hold less of it, and the same state.
  const LayoutCost& plain = find(all, "dp=2 tp=2 (1d)");
  const LayoutCost& seq = find(all, "dp=2 tp=2 (1d, seq)");
  EXPECT_GT(seq.act_bytes, 0);
  EXPECT_LT(seq.act_bytes, plain.act_bytes);
  EXPECT_EQ(seq.state_bytes, plain.state_bytes);
}

// The optimizer's update does not shrink with a rank's share of the batch:
// every data-parallel rank without ZeRO updates every parameter, while
// ZeRO, tensor parallelism and a pipeline split the update over the
// ranks.
TEST(LayoutSearch, TheUpdateCostsEachRankTheParametersItUpdates) {
  MachineCost m;
  m.gflops = 100;  // link: alpha = beta = 0
  m.update_s_per_param = 1e-9;
  const std::vector<std::string> buckets = {"parallel.bucket_mb=0.01"};
  const auto all = search_layouts(kGpt, buckets, 2, {1e9}, m, nullptr);
  const double products_s = 16 * 1e9 / 2 / 100e9;
  // Each layout's update: the elements its largest rank keeps optimizer
  // state for (AdamW: two per parameter), at 1 ns each.
  auto updated = [&](const std::string& name,
                     const std::vector<std::string>& layout) {
    std::vector<std::string> l = buckets;
    l.insert(l.end(), layout.begin(), layout.end());
    const Config cfg = load_config(kGpt, l);
    int64_t most = 0;
    for (int r = 0; r < 2; ++r) {
      const int pr = cfg.parallel.pp > 1 ? r : 0;
      const int sr = cfg.parallel.pp > 1 ? 0 : r;
      most = std::max(most, rank_memory(cfg, pr, sr).optimizer / 2);
    }
    const LayoutCost& c = find(all, name);
    EXPECT_NEAR(c.update_s, most * 1e-9, 1e-15) << name;
    return c;
  };
  const LayoutCost dp = updated("dp=2", {"parallel.dp=2"});
  const LayoutCost z1 =
      updated("dp=2 zero=1", {"parallel.dp=2", "parallel.zero=1"});
  const LayoutCost tp = updated("tp=2 (1d)", {"parallel.tp=2"});
  const LayoutCost sp = updated("sp=2", {"parallel.sp=2"});
  updated(
      "pp=2 (microbatches=2)", {"parallel.pp=2", "parallel.microbatches=2"});
  // Without ZeRO every parameter, once per rank.
  const int64_t params = rank_memory(load_config(kGpt, {})).params;
  EXPECT_NEAR(dp.update_s, params * 1e-9, 1e-15);
  EXPECT_NEAR(sp.update_s, params * 1e-9, 1e-15);
  // ZeRO and tensor parallelism: about half each (buckets and the
  // replicated norms and biases keep it from exactly half).
  EXPECT_LT(z1.update_s, 0.6 * dp.update_s);
  EXPECT_LT(tp.update_s, 0.6 * dp.update_s);
  // The step adds it to the products; on a free link nothing else.
  EXPECT_NEAR(dp.compute_s, products_s + dp.update_s, 1e-12);
  EXPECT_NEAR(dp.step_s, dp.compute_s, 1e-12);
  EXPECT_NEAR(z1.step_s, products_s + z1.update_s, 1e-12);
  EXPECT_LT(z1.step_s, dp.step_s);
  EXPECT_LT(tp.step_s, dp.step_s);
  // Without the rate the update counts nothing.
  m.update_s_per_param = 0;
  const auto none = search_layouts(kGpt, buckets, 2, {1e9}, m, nullptr);
  EXPECT_EQ(find(none, "dp=2").update_s, 0);
  EXPECT_NEAR(find(none, "dp=2").step_s, products_s, 1e-12);
}

// Ranks of one host communicate through shared memory: their own cores
// copy and sum, so the sync hides behind no backward.
TEST(LayoutSearch, CommunicationOnTheCoresHidesNoCompute) {
  MachineCost hidden, cores;
  hidden.gflops = cores.gflops = 1;
  hidden.link = cores.link = {1e-6, 1e-9};
  cores.comm_on_cores = true;
  const std::vector<std::string> buckets = {"parallel.bucket_mb=0.01"};
  const auto h = search_layouts(kGpt, buckets, 4, {2e6}, hidden, nullptr);
  const auto c = search_layouts(kGpt, buckets, 4, {2e6}, cores, nullptr);
  ASSERT_EQ(h.size(), c.size());
  int hid = 0;
  for (const LayoutCost& x : c) {
    EXPECT_NEAR(x.step_s, x.compute_s + x.sync_comm_s + x.other_comm_s, 1e-12)
        << x.name;
    const LayoutCost& y = find(h, x.name);
    // The same sync volume (a pipeline's slowest stage, whose sync the
    // step counts, may differ between the two machines).
    if (x.name.find("pp=") == std::string::npos) {
      EXPECT_DOUBLE_EQ(y.sync_comm_s, x.sync_comm_s) << x.name;
    }
    EXPECT_GE(x.step_s, y.step_s) << x.name;
    if (x.step_s > y.step_s + 1e-9)
      ++hid;
  }
  // Behind the backward most of a data-parallel sync was hidden.
  EXPECT_GT(hid, 10);
  const LayoutCost& dp = find(h, "dp=4");
  EXPECT_LT(dp.step_s, dp.compute_s + dp.sync_comm_s - 1e-6);
}

// Recompute is offered with the activations it saves (every model, in one
// stage and in pipelines, sequence parallelism included): it adds the
// blocks' forward to the compute and holds less; chosen by the user, it
// holds for every layout.
TEST(LayoutSearch, RecomputeTradesAForwardForItsActivations) {
  const auto offered = [](const std::vector<std::vector<std::string>>& c) {
    std::vector<std::vector<std::string>> out;
    for (const auto& l : c) {
      if (std::find(l.begin(), l.end(), "parallel.recompute=block") != l.end())
        out.push_back(l);
    }
    return out;
  };
  const auto rc = offered(layout_candidates(load_config(kGpt, {}), 4));
  EXPECT_FALSE(rc.empty());
  bool with_sp = false, with_pp = false;
  for (const auto& l : rc) {
    with_pp =
        with_pp || std::find(l.begin(), l.end(), "parallel.pp=1") == l.end();
    with_sp =
        with_sp || std::find(l.begin(), l.end(), "parallel.sp=1") == l.end();
  }
  EXPECT_TRUE(with_sp);
  EXPECT_TRUE(with_pp);
  EXPECT_TRUE(offered(layout_candidates(
                          load_config(kGpt, {"parallel.recompute=block"}), 4))
                  .empty());
  // The ViT's: in one stage, in every tensor-parallel mode and with sp.
  const auto vit = offered(layout_candidates(
      load_config(std::string(NDT_SOURCE_DIR) + "/configs/verify/vit.yaml", {}),
      4));
  EXPECT_FALSE(vit.empty());
  bool grid = false, sp = false, pp = false;
  for (const auto& l : vit) {
    grid =
        grid || std::find(l.begin(), l.end(), "parallel.tp_mode=2d") != l.end();
    sp = sp || std::find(l.begin(), l.end(), "parallel.sp=1") == l.end();
    pp = pp || std::find(l.begin(), l.end(), "parallel.pp=1") == l.end();
  }
  EXPECT_TRUE(grid);
  EXPECT_TRUE(sp);
  EXPECT_TRUE(pp);
  // The MLP's: data parallelism and pipelines.
  const auto mlp = offered(layout_candidates(
      load_config(std::string(NDT_SOURCE_DIR) + "/configs/verify/mlp.yaml", {}),
      4));
  bool mlp_pp = false;
  for (const auto& l : mlp)
    mlp_pp =
        mlp_pp || std::find(l.begin(), l.end(), "parallel.pp=1") == l.end();
  EXPECT_TRUE(mlp_pp);

  MachineCost m;
  m.gflops = 100;  // a free link
  const ModelFlops flops{1e9, 0.25e9};
  const auto all = search_layouts(kGpt, {}, 2, flops, m, nullptr);
  for (const char* n : {"dp=2", "tp=2 (1d)", "tp=2 (1d, seq)", "sp=2"}) {
    SCOPED_TRACE(n);
    const LayoutCost& plain = find(all, n);
    const LayoutCost& again = find(all, std::string(n) + " recompute");
    // 16 samples x 0.25 GFLOP / 2 ranks / 100 GFLOP/s.
    EXPECT_NEAR(
        again.compute_s - plain.compute_s, 16 * 0.25e9 / 2 / 100e9, 1e-12);
    EXPECT_EQ(again.state_bytes, plain.state_bytes);
    EXPECT_GT(again.act_bytes, 0);
    EXPECT_LT(again.act_bytes, plain.act_bytes);
  }
  // Chosen by the user: every layout recomputes.
  const auto chosen =
      search_layouts(kGpt, {"parallel.recompute=block"}, 2, flops, m, nullptr);
  for (const LayoutCost& c : chosen)
    EXPECT_NE(c.name.find("recompute"), std::string::npos) << c.name;
  // 1F1B's idle share is the same with a backward of 3 forwards as of 2.
  const LayoutCost& pipe = find(chosen, "pp=2 (microbatches=4) recompute");
  const double bubble =
      verify_schedule(make_schedule(PipeSchedule::kOneFOneB, 2, 4)).bubble;
  EXPECT_DOUBLE_EQ(
      bubble,
      verify_schedule(make_schedule(PipeSchedule::kOneFOneB, 2, 4), 1, 3)
          .bubble);
  EXPECT_NEAR(
      pipe.compute_s - pipe.update_s,
      16 * 1.25e9 / 2 / 100e9 / (1 - bubble),
      1e-12);
  // Offered in a pipeline: the extra forward over the busy share, and
  // less held.
  const LayoutCost& staged = find(all, "pp=2 (microbatches=4)");
  const LayoutCost& again = find(all, "pp=2 (microbatches=4) recompute");
  EXPECT_NEAR(
      again.compute_s - staged.compute_s,
      16 * 0.25e9 / 2 / 100e9 / (1 - bubble),
      1e-12);
  EXPECT_GT(again.act_bytes, 0);
  EXPECT_LT(again.act_bytes, staged.act_bytes);
}

}  // namespace
}  // namespace ndt
