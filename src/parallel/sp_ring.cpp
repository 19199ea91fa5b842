#include "parallel/sp_ring.h"

namespace ndt {

RingPass::~RingPass() {
  // A layer that throws between start and wait must not leave operations
  // running on buffers it is about to free; a failed wait is already being
  // reported by the exception in flight.
  try {
    wait();
  } catch (...) {
  }
}

void RingPass::start_send(const Tensor& t, int tag) {
  work_.push_back(group_.send_async(t.data(), t.numel(), next(), tag));
}

void RingPass::start_recv(Tensor& t, int tag) {
  work_.push_back(group_.recv_async(t.data(), t.numel(), prev(), tag));
}

void RingPass::wait() {
  std::vector<std::unique_ptr<Work>> work = std::move(work_);
  work_.clear();
  for (auto& w : work)
    w->wait();
}

}  // namespace ndt
