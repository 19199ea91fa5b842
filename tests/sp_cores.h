// The sequence-parallel attention cores by name, for the tests that run
// them all (tests/parallel/test_sp_attention.cpp, tests/plan/
// test_sp_attention_cost.cpp): each with the split it runs on.
#pragma once

#include <memory>

#include "comm/process_group.h"
#include "nn/module.h"
#include "nn/seq_split.h"
#include "parallel/ring_attention.h"
#include "parallel/ring_self_attention.h"
#include "parallel/ulysses_attention.h"

namespace ndt::test {

enum class SpCore { kRsa, kRing, kRingZigzag, kUlysses };

inline constexpr SpCore kSpCores[] = {
    SpCore::kRsa, SpCore::kRing, SpCore::kRingZigzag, SpCore::kUlysses};

inline const char* name_of(SpCore a) {
  switch (a) {
    case SpCore::kRsa:
      return "rsa";
    case SpCore::kRing:
      return "ring";
    case SpCore::kRingZigzag:
      return "ring(zigzag)";
    case SpCore::kUlysses:
      return "ulysses";
  }
  return "?";
}

inline SeqSplit split_of(SpCore a) {
  return a == SpCore::kRingZigzag ? SeqSplit::kZigzag : SeqSplit::kContiguous;
}

// block: keys per score tile of the ring cores.
inline std::unique_ptr<Module> make_sp_core(
    SpCore a, int heads, bool causal, ProcessGroup& sp, int block) {
  switch (a) {
    case SpCore::kRsa:
      return std::make_unique<RingSelfAttention>(heads, causal, sp);
    case SpCore::kRing:
    case SpCore::kRingZigzag:
      return std::make_unique<RingAttention>(
          heads, causal, sp, split_of(a), block);
    case SpCore::kUlysses:
      return std::make_unique<UlyssesAttention>(heads, causal, sp);
  }
  return nullptr;
}

}  // namespace ndt::test
