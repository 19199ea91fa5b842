#include "comm/ring_algorithms.h"

#include <algorithm>
#include <cstring>

namespace ndt::detail {
namespace {

int mod(int64_t a, int n) {
  return static_cast<int>(((a % n) + n) % n);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Element range [lo, lo + len) of piece p of `parts` equal pieces of a
// span of `len_total` elements starting at `base`.
struct Range {
  int64_t lo;
  int64_t len;
};
Range piece(int64_t base, int64_t len_total, int64_t p, int64_t parts) {
  int64_t lo = len_total * p / parts;
  int64_t hi = len_total * (p + 1) / parts;
  return {base + lo, hi - lo};
}

// Pieces of at most chunk_bytes for `count` elements of T.
template <typename T>
int64_t parts_of(const RingGroup& g, int64_t count) {
  int64_t piece_elems =
      std::max<int64_t>(1, g.chunk_bytes / int64_t{sizeof(T)});
  return std::max<int64_t>(1, ceil_div(count, piece_elems));
}

template <typename T>
constexpr ElemType elem_type() {
  return sizeof(T) == sizeof(double) ? ElemType::kDouble : ElemType::kFloat;
}

RoundMsg recv_msg(int peer, void* buf, int64_t len, ElemType type) {
  return RoundMsg{false, peer, buf, len, type};
}

RoundMsg send_msg(int peer, const void* buf, int64_t len, ElemType type) {
  // The runner only reads a send's buffer.
  return RoundMsg{true, peer, const_cast<void*>(buf), len, type};
}

// Piece p of segment seg of an n-way split of count elements.
Range seg_piece(int64_t count, int n, int seg, int64_t p, int64_t parts) {
  int64_t lo = count * seg / n, hi = count * (seg + 1) / n;
  return piece(lo, hi - lo, p, parts);
}

}  // namespace

// ---------------------------------------------------------- RingAllReduce
// Reduce-step rounds receive into scratch slot k % 2 and combine in
// finish().

template <typename T>
RingAllReduce<T>::RingAllReduce(
    const RingGroup& g, T* buf, int64_t count, ReduceOp op)
    : g_(g), buf_(buf), count_(count), op_(op) {
  const int n = g.size;
  parts_ = parts_of<T>(g, ceil_div(count, n));
  set_rounds(int64_t{2} * (n - 1) * parts_, parts_);
}

template <typename T>
int RingAllReduce<T>::post(int64_t k, RoundMsg* msgs) {
  const int n = g_.size, r = g_.rank;
  if (k == 0) {
    slot_elems_ = ceil_div(ceil_div(count_, n), parts_);
    scratch_ = static_cast<T*>(g_.scratch->get(2 * slot_elems_ * sizeof(T)));
  }
  int64_t t = k / parts_, p = k % parts_;
  bool reduce_step = t < n - 1;
  int send_seg = reduce_step ? mod(r - t, n) : mod(r + 1 - (t - n + 1), n);
  int recv_seg = reduce_step ? mod(r - t - 1, n) : mod(r - (t - n + 1), n);
  Range snd = seg_piece(count_, n, send_seg, p, parts_);
  Range rcv = seg_piece(count_, n, recv_seg, p, parts_);
  T* dst = reduce_step ? scratch_ + (k % 2) * slot_elems_ : buf_ + rcv.lo;
  int nmsg = 0;
  if (rcv.len > 0)
    msgs[nmsg++] = recv_msg(mod(r - 1, n), dst, rcv.len, elem_type<T>());
  if (snd.len > 0) {
    msgs[nmsg++] =
        send_msg(mod(r + 1, n), buf_ + snd.lo, snd.len, elem_type<T>());
  }
  return nmsg;
}

template <typename T>
void RingAllReduce<T>::finish(int64_t k) {
  const int n = g_.size, r = g_.rank;
  int64_t t = k / parts_, p = k % parts_;
  if (t >= n - 1)
    return;
  Range rcv = seg_piece(count_, n, mod(r - t - 1, n), p, parts_);
  combine(buf_ + rcv.lo, scratch_ + (k % 2) * slot_elems_, rcv.len, op_);
}

template class RingAllReduce<float>;
template class RingAllReduce<double>;

// ------------------------------------------------------ RingReduceScatter
// Step t sends the running sum of block r-t-1 (this rank's input block at
// t = 0) and receives block r-t-2's into scratch; finish() adds this
// rank's input to it.

RingReduceScatter::RingReduceScatter(
    const RingGroup& g, const float* in, float* out, int64_t count)
    : g_(g), in_(in), out_(out), count_(count) {
  parts_ = parts_of<float>(g, count);
  set_rounds(int64_t{g.size - 1} * parts_, parts_);
}

int RingReduceScatter::post(int64_t k, RoundMsg* msgs) {
  const int n = g_.size, r = g_.rank;
  if (k == 0) {
    slot_elems_ = ceil_div(count_, parts_);
    scratch_ =
        static_cast<float*>(g_.scratch->get(2 * slot_elems_ * sizeof(float)));
  }
  int64_t t = k / parts_, p = k % parts_;
  Range pc = piece(0, count_, p, parts_);
  int send_blk = mod(r - t - 1, n);
  const float* src = t == 0 ? in_ + send_blk * count_ + pc.lo : out_ + pc.lo;
  if (pc.len == 0)
    return 0;
  msgs[0] = recv_msg(
      mod(r - 1, n),
      scratch_ + (k % 2) * slot_elems_,
      pc.len,
      ElemType::kFloat);
  msgs[1] = send_msg(mod(r + 1, n), src, pc.len, ElemType::kFloat);
  return 2;
}

void RingReduceScatter::finish(int64_t k) {
  const int n = g_.size, r = g_.rank;
  int64_t t = k / parts_, p = k % parts_;
  Range pc = piece(0, count_, p, parts_);
  const float* mine = in_ + mod(r - t - 2, n) * count_ + pc.lo;
  const float* got = scratch_ + (k % 2) * slot_elems_;
  combine_into(out_ + pc.lo, got, mine, pc.len, ReduceOp::kSum);
}

// ---------------------------------------------------------- RingAllGather
// Step t forwards block r-t (received the step before, this rank's own at
// t = 0) and receives block r-t-1.

RingAllGather::RingAllGather(
    const RingGroup& g, const float* in, float* out, int64_t count)
    : g_(g), in_(in), out_(out), count_(count) {
  parts_ = parts_of<float>(g, count);
  set_rounds(int64_t{g.size - 1} * parts_, parts_);
}

int RingAllGather::post(int64_t k, RoundMsg* msgs) {
  const int n = g_.size, r = g_.rank;
  if (k == 0 && in_ != out_ + r * count_) {
    std::memcpy(out_ + r * count_, in_, count_ * sizeof(float));
  }
  int64_t t = k / parts_, p = k % parts_;
  Range pc = piece(0, count_, p, parts_);
  if (pc.len == 0)
    return 0;
  msgs[0] = recv_msg(
      mod(r - 1, n),
      out_ + mod(r - t - 1, n) * count_ + pc.lo,
      pc.len,
      ElemType::kFloat);
  msgs[1] = send_msg(
      mod(r + 1, n),
      out_ + mod(r - t, n) * count_ + pc.lo,
      pc.len,
      ElemType::kFloat);
  return 2;
}

// ------------------------------------------------------- PairwiseAllToAll

PairwiseAllToAll::PairwiseAllToAll(
    const RingGroup& g, const float* in, float* out, int64_t count)
    : g_(g), in_(in), out_(out), count_(count) {
  parts_ = parts_of<float>(g, count);
  set_rounds(int64_t{g.size - 1} * parts_, 0);
}

int PairwiseAllToAll::post(int64_t k, RoundMsg* msgs) {
  const int n = g_.size, r = g_.rank;
  if (k == 0) {
    std::memcpy(out_ + r * count_, in_ + r * count_, count_ * sizeof(float));
  }
  int64_t t = k / parts_ + 1, p = k % parts_;
  Range pc = piece(0, count_, p, parts_);
  if (pc.len == 0)
    return 0;
  int to = mod(r + t, n), from = mod(r - t, n);
  msgs[0] =
      recv_msg(from, out_ + from * count_ + pc.lo, pc.len, ElemType::kFloat);
  msgs[1] = send_msg(to, in_ + to * count_ + pc.lo, pc.len, ElemType::kFloat);
  return 2;
}

// --------------------------------------------------------- ChainBroadcast
// Position q receives from q-1 and sends to q+1; a piece is forwarded the
// round after it arrived (lag 1; the root has nothing to wait for).

ChainBroadcast::ChainBroadcast(
    const RingGroup& g, float* buf, int64_t count, int root)
    : g_(g), buf_(buf), count_(count), root_(root) {
  parts_ = parts_of<float>(g, count);
  const bool is_root = g.rank == root;
  set_rounds(parts_ + g.size - 2, is_root ? 0 : 1);
}

int ChainBroadcast::post(int64_t k, RoundMsg* msgs) {
  const int n = g_.size, r = g_.rank;
  const int q = mod(r - root_, n);
  int nmsg = 0;
  const int64_t in = k - q + 1, out = k - q;
  if (q >= 1 && in >= 0 && in < parts_) {
    Range pc = piece(0, count_, in, parts_);
    if (pc.len > 0) {
      msgs[nmsg++] =
          recv_msg(mod(r - 1, n), buf_ + pc.lo, pc.len, ElemType::kFloat);
    }
  }
  if (q <= n - 2 && out >= 0 && out < parts_) {
    Range pc = piece(0, count_, out, parts_);
    if (pc.len > 0) {
      msgs[nmsg++] =
          send_msg(mod(r + 1, n), buf_ + pc.lo, pc.len, ElemType::kFloat);
    }
  }
  return nmsg;
}

// ------------------------------------------------------------ ChainReduce
// Round k receives into slot k % 2; finish(k) adds this rank's values to
// it (on root: into out), and round k + 1 sends it on (lag 1: the slot is
// received into again only after that send completed).

ChainReduce::ChainReduce(
    const RingGroup& g, const float* in, float* out, int64_t count, int root)
    : g_(g), in_(in), out_(out), count_(count), root_(root) {
  parts_ = parts_of<float>(g, count);
  q_ = mod(g.rank - root - 1, g.size);
  const bool middle = q_ >= 1 && q_ <= g.size - 2;
  set_rounds(parts_ + g.size - 2, middle ? 1 : 0);
}

int ChainReduce::post(int64_t k, RoundMsg* msgs) {
  const int n = g_.size, r = g_.rank;
  if (k == 0 && q_ >= 1) {
    slot_elems_ = ceil_div(count_, parts_);
    scratch_ =
        static_cast<float*>(g_.scratch->get(2 * slot_elems_ * sizeof(float)));
  }
  int nmsg = 0;
  const int64_t in = k - q_ + 1, out = k - q_;
  if (q_ >= 1 && in >= 0 && in < parts_) {
    Range pc = piece(0, count_, in, parts_);
    if (pc.len > 0) {
      msgs[nmsg++] = recv_msg(
          mod(r - 1, n),
          scratch_ + (k % 2) * slot_elems_,
          pc.len,
          ElemType::kFloat);
    }
  }
  if (q_ <= n - 2 && out >= 0 && out < parts_) {
    Range pc = piece(0, count_, out, parts_);
    const float* src =
        q_ == 0 ? in_ + pc.lo : scratch_ + ((k + 1) % 2) * slot_elems_;
    if (pc.len > 0)
      msgs[nmsg++] = send_msg(mod(r + 1, n), src, pc.len, ElemType::kFloat);
  }
  return nmsg;
}

void ChainReduce::finish(int64_t k) {
  const int64_t in = k - q_ + 1;
  if (q_ == 0 || in < 0 || in >= parts_)
    return;
  Range pc = piece(0, count_, in, parts_);
  float* got = scratch_ + (k % 2) * slot_elems_;
  const float* mine = in_ + pc.lo;
  if (q_ < g_.size - 1) {
    combine(got, mine, pc.len, ReduceOp::kSum);
    return;
  }
  float* dst = out_ + pc.lo;
  if (dst == mine) {
    combine(dst, got, pc.len, ReduceOp::kSum);  // a sum is symmetric
  } else {
    combine_into(dst, got, mine, pc.len, ReduceOp::kSum);
  }
}

}  // namespace ndt::detail
