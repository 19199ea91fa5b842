#include "comm/mpi_ops.h"

#include <algorithm>
#include <vector>

#include "comm/mpi_error.h"

namespace ndt::detail {
namespace {

// On a lane's communicator, where collectives run one at a time.
constexpr int kRingTag = 1;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

MPI_Datatype mpi_type(ElemType t) {
  return t == ElemType::kDouble ? MPI_DOUBLE : MPI_FLOAT;
}

class NbcOp final : public RoundOp {
 public:
  NbcOp(
      MpiGroupState& s,
      MpiLane& lane,
      OpType type,
      int64_t chunks,
      std::function<void(int64_t, MPI_Request*)> post_fn)
      : RoundOp(s, lane, type), post_fn_(std::move(post_fn)) {
    set_rounds(chunks, 0);
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    post_fn_(k, reqs);
    return 1;
  }

 private:
  std::function<void(int64_t, MPI_Request*)> post_fn_;
};

class P2pOp final : public MpiOp {
 public:
  P2pOp(
      MpiGroupState& s,
      OpType type,
      float* buf,
      int64_t count,
      int peer,
      int tag)
      : MpiOp(s, nullptr, type, peer, tag) {
    int64_t piece_elems =
        std::max<int64_t>(1, s.chunk_bytes / int64_t{sizeof(float)});
    int64_t parts = std::max<int64_t>(1, ceil_div(count, piece_elems));
    reqs_.reserve(parts);
    for (int64_t p = 0; p < parts; ++p) {
      int64_t lo = count * p / parts, hi = count * (p + 1) / parts;
      if (hi == lo && count > 0)
        continue;
      MPI_Request req;
      if (type == OpType::kSend) {
        NDT_MPI_CHECK(MPI_Isend(
            buf + lo,
            static_cast<int>(hi - lo),
            MPI_FLOAT,
            peer,
            tag,
            s.comm,
            &req));
      } else {
        NDT_MPI_CHECK(MPI_Irecv(
            buf + lo,
            static_cast<int>(hi - lo),
            MPI_FLOAT,
            peer,
            tag,
            s.comm,
            &req));
      }
      reqs_.push_back(req);
    }
  }

  bool advance() override {
    int flag = 0;
    NDT_MPI_CHECK(MPI_Testall(
        static_cast<int>(reqs_.size()),
        reqs_.data(),
        &flag,
        MPI_STATUSES_IGNORE));
    if (flag)
      s_.progress->note_event();
    return flag != 0;
  }

  // A recv can be cancelled (a send in general cannot).
  bool abandon() override {
    if (type() != OpType::kRecv)
      return false;
    for (MPI_Request& req : reqs_) {
      if (req == MPI_REQUEST_NULL)
        continue;
      NDT_MPI_CHECK(MPI_Cancel(&req));
      NDT_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    return true;
  }

 private:
  std::vector<MPI_Request> reqs_;
};

}  // namespace

bool RoundOp::advance() {
  for (;;) {
    while (started_ < rounds_ && started_ - finished_ < kDepth &&
           (lag_ == 0 || started_ - lag_ < finished_)) {
      int slot = static_cast<int>(started_ % kDepth);
      nreq_[slot] = post(started_, reqs_[slot]);
      ++started_;
    }
    if (finished_ == rounds_)
      return true;
    int slot = static_cast<int>(finished_ % kDepth);
    int flag = 0;
    NDT_MPI_CHECK(
        MPI_Testall(nreq_[slot], reqs_[slot], &flag, MPI_STATUSES_IGNORE));
    if (!flag)
      return false;
    nreq_[slot] = 0;
    finish(finished_);
    ++finished_;
    s_.progress->note_event();
  }
}

void RoundOp::post_msgs(const RoundMsg* msgs, int n, MPI_Request* reqs) {
  for (int i = 0; i < n; ++i) {
    const RoundMsg& m = msgs[i];
    if (m.send) {
      NDT_MPI_CHECK(MPI_Isend(
          m.buf,
          static_cast<int>(m.len),
          mpi_type(m.type),
          m.peer,
          kRingTag,
          lane_->coll,
          &reqs[i]));
    } else {
      NDT_MPI_CHECK(MPI_Irecv(
          m.buf,
          static_cast<int>(m.len),
          mpi_type(m.type),
          m.peer,
          kRingTag,
          lane_->coll,
          &reqs[i]));
    }
  }
}

std::shared_ptr<MpiOp> make_nbc_op(
    MpiGroupState& s,
    MpiLane& lane,
    OpType type,
    int64_t chunks,
    std::function<void(int64_t, MPI_Request*)> post) {
  return std::make_shared<NbcOp>(s, lane, type, chunks, std::move(post));
}

std::shared_ptr<MpiOp> make_p2p_op(
    MpiGroupState& s,
    OpType type,
    float* buf,
    int64_t count,
    int peer,
    int tag) {
  return std::make_shared<P2pOp>(s, type, buf, count, peer, tag);
}

RingGroup ring_group(MpiGroupState& s, MpiLane& lane) {
  return RingGroup{s.rank, s.size, s.chunk_bytes, &lane};
}

}  // namespace ndt::detail
