// The ring of a sequence-parallel group, shared by the ring attention
// layers (ring_self_attention.h, ring_attention.h): rank r sends to
// next() = r + 1 and receives from prev() = r - 1 (mod N), so after s
// steps it holds the block rank owner(s) = r - s (mod N) started with.
//
// A RingPass posts non-blocking sends and receives and waits for them all
// at once: a layer starts the transfer of step s + 1 before it computes
// step s and waits after the compute (ALGORITHMS.md 2.4: sends overlap
// compute). Buffers given to start_* must stay untouched (a send's) or
// unread (a receive's) until wait() returns.
#pragma once

#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "tensor/tensor.h"

namespace ndt {

class RingPass {
 public:
  explicit RingPass(ProcessGroup& group) : group_(group) {}
  ~RingPass();
  RingPass(const RingPass&) = delete;
  RingPass& operator=(const RingPass&) = delete;

  int next() const {
    return (group_.rank() + 1) % group_.size();
  }
  int prev() const {
    return (group_.rank() + group_.size() - 1) % group_.size();
  }
  // Rank whose block this rank holds after `step` steps.
  int owner(int step) const {
    return ((group_.rank() - step) % group_.size() + group_.size()) %
           group_.size();
  }

  // Sends `t` (all of it) to next() / receives prev()'s into `t`.
  void start_send(const Tensor& t, int tag);
  void start_recv(Tensor& t, int tag);
  // Both: the usual ring step.
  void start(const Tensor& send, Tensor& recv, int tag) {
    start_recv(recv, tag);
    start_send(send, tag);
  }
  // Waits for every operation started since the last wait().
  void wait();

  // Passes `mine` (this rank's block) around the whole ring: f(owner,
  // held) at each of N steps, `held` being rank owner's block, with the
  // transfer of the next step posted before f runs. Allocates one more
  // buffer like `mine`; f must not modify `held`.
  template <typename F>
  void circulate(const Tensor& mine, int tag, F&& f) {
    Tensor buf[2] = {mine, Tensor(mine.shape(), mine.tag())};
    for (int s = 0; s < group_.size(); ++s) {
      const Tensor& held = buf[s % 2];
      if (s + 1 < group_.size())
        start(held, buf[(s + 1) % 2], tag);
      f(owner(s), held);
      wait();
    }
  }

 private:
  ProcessGroup& group_;
  std::vector<std::unique_ptr<Work>> work_;
};

}  // namespace ndt
