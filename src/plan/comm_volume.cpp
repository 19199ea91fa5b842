#include "plan/comm_volume.h"

#include "base/check.h"

namespace ndt {

CommVolume& CommVolume::add(
    OpType t, int64_t calls, int64_t elements, int64_t element_bytes) {
  NDT_ASSERT(calls >= 0 && elements >= 0, "negative communication volume");
  OpVolume& v = (*this)[t];
  v.calls += calls;
  v.elements += calls * elements;
  v.bytes += calls * elements * element_bytes;
  return *this;
}

CommVolume& CommVolume::operator+=(const CommVolume& o) {
  for (size_t i = 0; i < op.size(); ++i) {
    op[i].calls += o.op[i].calls;
    op[i].elements += o.op[i].elements;
    op[i].bytes += o.op[i].bytes;
  }
  return *this;
}

int64_t CommVolume::total_calls() const {
  int64_t n = 0;
  for (const OpVolume& v : op)
    n += v.calls;
  return n;
}

int64_t CommVolume::total_bytes() const {
  int64_t n = 0;
  for (const OpVolume& v : op)
    n += v.bytes;
  return n;
}

CommVolume operator+(CommVolume a, const CommVolume& b) {
  a += b;
  return a;
}

CommVolume operator*(int64_t k, const CommVolume& v) {
  NDT_ASSERT(k >= 0, "negative repetition count ", k);
  CommVolume out;
  for (size_t i = 0; i < v.op.size(); ++i) {
    out.op[i].calls = k * v.op[i].calls;
    out.op[i].elements = k * v.op[i].elements;
    out.op[i].bytes = k * v.op[i].bytes;
  }
  return out;
}

CommVolume from_ledger(const CommLedger& ledger) {
  CommVolume v;
  for (int i = 0; i < kNumOpTypes; ++i) {
    const CommOpCount& c = ledger[static_cast<OpType>(i)];
    v.op[i] = {c.calls, c.elements, c.bytes};
  }
  return v;
}

double ring_wire_bytes(const CommVolume& v, int group_size) {
  const double P = group_size;
  if (group_size <= 1)
    return 0;
  return double(v[OpType::kAllReduce].bytes) * 2.0 * (P - 1) / P +
         double(v[OpType::kReduceScatter].bytes + v[OpType::kAllGather].bytes) *
             (P - 1) +
         double(v[OpType::kSend].bytes);
}

std::string to_string(const CommVolume& v) {
  std::string s;
  for (int i = 0; i < kNumOpTypes; ++i) {
    const OpVolume& o = v.op[i];
    if (o.calls == 0 && o.elements == 0 && o.bytes == 0)
      continue;
    if (!s.empty())
      s += "; ";
    s += std::string(to_string(static_cast<OpType>(i))) + " " +
         std::to_string(o.calls) + " calls " + std::to_string(o.elements) +
         " el " + std::to_string(o.bytes) + " B";
  }
  return s.empty() ? "none" : s;
}

PassVolume operator+(const PassVolume& a, const PassVolume& b) {
  return {a.fwd + b.fwd, a.bwd + b.bwd};
}

PassVolume operator*(int64_t k, const PassVolume& p) {
  return {k * p.fwd, k * p.bwd};
}

}  // namespace ndt
