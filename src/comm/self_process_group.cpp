#include "comm/self_process_group.h"

#include <cstring>

#include "base/check.h"

namespace ndt {
namespace {

class SelfProcessGroup final : public ProcessGroup {
 public:
  explicit SelfProcessGroup(std::string name) : ProcessGroup(std::move(name)) {}

  int rank() const override {
    return 0;
  }
  int size() const override {
    return 1;
  }

  std::unique_ptr<Work> all_reduce_async(
      float* buf, int64_t count, ReduceOp) override {
    check_count(OpType::kAllReduce, buf, count);
    record_op(OpType::kAllReduce, count);
    return done();
  }
  std::unique_ptr<Work> all_reduce_async(
      double* buf, int64_t count, ReduceOp) override {
    check_count(OpType::kAllReduce, buf, count);
    record_op(OpType::kAllReduce, count, sizeof(double));
    return done();
  }
  std::unique_ptr<Work> reduce_scatter_async(
      const float* in, float* out, int64_t count) override {
    constexpr OpType kOp = OpType::kReduceScatter;
    check_count(kOp, in, count);
    check_count(kOp, out, count);
    check_disjoint(kOp, in, count * 4, out, count * 4);
    record_op(kOp, count);
    return copy(in, out, count);
  }
  std::unique_ptr<Work> all_gather_async(
      const float* in, float* out, int64_t count) override {
    check_count(OpType::kAllGather, in, count);
    check_count(OpType::kAllGather, out, count);
    record_op(OpType::kAllGather, count);
    return copy(in, out, count);
  }
  std::unique_ptr<Work> broadcast_async(
      float* buf, int64_t count, int root) override {
    check_count(OpType::kBroadcast, buf, count);
    check_rank(OpType::kBroadcast, "root", root);
    record_op(OpType::kBroadcast, count);
    return done();
  }
  std::unique_ptr<Work> reduce_async(
      const float* in, float* out, int64_t count, int root) override {
    check_count(OpType::kReduce, in, count);
    check_count(OpType::kReduce, out, count);
    check_rank(OpType::kReduce, "root", root);
    record_op(OpType::kReduce, count);
    return copy(in, out, count);
  }
  std::unique_ptr<Work> all_to_all_async(
      const float* in, float* out, int64_t count) override {
    constexpr OpType kOp = OpType::kAllToAll;
    check_count(kOp, in, count);
    check_count(kOp, out, count);
    check_disjoint(kOp, in, count * 4, out, count * 4);
    record_op(kOp, count);
    return copy(in, out, count);
  }
  std::unique_ptr<Work> send_async(
      const float*, int64_t, int peer, int) override {
    check_rank(OpType::kSend, "peer", peer);
    NDT_ASSERT(false, "send to itself on group ", name(), " of one rank");
    return done();
  }
  std::unique_ptr<Work> recv_async(float*, int64_t, int peer, int) override {
    check_rank(OpType::kRecv, "peer", peer);
    NDT_ASSERT(false, "recv from itself on group ", name(), " of one rank");
    return done();
  }
  void barrier() override {
    record_op(OpType::kBarrier, 0);
  }
  std::unique_ptr<ProcessGroup> split(
      int /*color*/, int /*key*/, std::string name) override {
    auto g = std::make_unique<SelfProcessGroup>(std::move(name));
    g->set_timeout_s(timeout_s());
    return g;
  }

 private:
  static std::unique_ptr<Work> done() {
    return std::make_unique<CompletedWork>();
  }
  static std::unique_ptr<Work> copy(
      const float* in, float* out, int64_t count) {
    if (count > 0 && in != out)
      std::memcpy(out, in, size_t(count) * sizeof(float));
    return done();
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_self_group(std::string name) {
  return std::make_unique<SelfProcessGroup>(std::move(name));
}

SingleRankMesh::SingleRankMesh(const std::vector<std::string>& names)
    : world_(make_self_group("world")),
      mesh_(std::make_unique<Mesh>(
          *world_, std::vector<int>(names.size(), 1), names)) {}

}  // namespace ndt
