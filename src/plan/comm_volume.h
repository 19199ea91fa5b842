// CommVolume: the communication one rank asks of one process group, in the
// CommLedger's own units (Note [Comm ledger] in comm/process_group.h): per
// OpType the number of calls, the sum of their element counts and the bytes
// (fp64 all-reduce 8 per element, everything else 4). The plan library
// predicts CommVolumes; from_ledger() reads a group's measured one, and the
// two compare with ==.
//
// Deliberately not here: bytes on the wire or time (both depend on the
// collective algorithm; ring_wire_bytes() gives the ring estimate).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "comm/process_group.h"

namespace ndt {

inline constexpr int64_t kFp32Bytes = 4;
inline constexpr int64_t kFp64Bytes = 8;

struct OpVolume {
  int64_t calls = 0;
  int64_t elements = 0;
  int64_t bytes = 0;

  bool operator==(const OpVolume&) const = default;
};

struct CommVolume {
  std::array<OpVolume, kNumOpTypes> op{};  // indexed by OpType

  OpVolume& operator[](OpType t) {
    return op[static_cast<size_t>(t)];
  }
  const OpVolume& operator[](OpType t) const {
    return op[static_cast<size_t>(t)];
  }
  // Adds `calls` operations of `elements` each, element_bytes per element.
  CommVolume& add(
      OpType t,
      int64_t calls,
      int64_t elements,
      int64_t element_bytes = kFp32Bytes);
  CommVolume& operator+=(const CommVolume& o);
  int64_t total_calls() const;
  int64_t total_bytes() const;

  bool operator==(const CommVolume&) const = default;
};

CommVolume operator+(CommVolume a, const CommVolume& b);
// k repetitions of v (k >= 0).
CommVolume operator*(int64_t k, const CommVolume& v);

// What `ledger` recorded, as a CommVolume.
CommVolume from_ledger(const CommLedger& ledger);

// Bytes one rank sends with ring algorithms: all-reduce 2 (P-1)/P x the
// buffer, reduce-scatter and all-gather (P-1) x the block, send the buffer.
// An estimate derived from the counts, not a measurement.
double ring_wire_bytes(const CommVolume& v, int group_size);

// "all_reduce 3 calls 1024 el 4096 B; send ..." (op types with calls only;
// "none" when empty), for test failure messages and logs.
std::string to_string(const CommVolume& v);

// A layer's (or a model's) volume in forward and in backward.
struct PassVolume {
  CommVolume fwd;
  CommVolume bwd;

  CommVolume step() const {
    return fwd + bwd;
  }
  bool operator==(const PassVolume&) const = default;
};

PassVolume operator+(const PassVolume& a, const PassVolume& b);
PassVolume operator*(int64_t k, const PassVolume& p);

}  // namespace ndt
