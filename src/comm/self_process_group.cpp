#include "comm/self_process_group.h"

#include <cstring>

#include "base/error.h"

namespace ndt {
namespace {

// Argument checks and the ledger are the base class's (Note [Backend
// hooks]); a reduction over one rank is its input.
class SelfProcessGroup final : public ProcessGroup {
 public:
  explicit SelfProcessGroup(std::string name)
      : ProcessGroup(std::move(name), 0, 1) {}

 protected:
  std::unique_ptr<Work> do_all_reduce_async(
      float*, int64_t, ReduceOp) override {
    return done();
  }
  std::unique_ptr<Work> do_all_reduce_async(
      double*, int64_t, ReduceOp) override {
    return done();
  }
  std::unique_ptr<Work> do_reduce_scatter_async(
      const float* in, float* out, int64_t count) override {
    return copy(in, out, count);
  }
  std::unique_ptr<Work> do_all_gather_async(
      const float* in, float* out, int64_t count) override {
    return copy(in, out, count);
  }
  std::unique_ptr<Work> do_broadcast_async(float*, int64_t, int) override {
    return done();
  }
  std::unique_ptr<Work> do_reduce_async(
      const float* in, float* out, int64_t count, int) override {
    return copy(in, out, count);
  }
  std::unique_ptr<Work> do_all_to_all_async(
      const float* in, float* out, int64_t count) override {
    return copy(in, out, count);
  }
  std::unique_ptr<Work> do_send_async(
      const float*, int64_t, int, int) override {
    throw CommError("send to itself on group " + name() + " of one rank");
  }
  std::unique_ptr<Work> do_recv_async(float*, int64_t, int, int) override {
    throw CommError("recv from itself on group " + name() + " of one rank");
  }
  void do_barrier() override {}
  std::unique_ptr<ProcessGroup> do_split(int, int, std::string name) override {
    return std::make_unique<SelfProcessGroup>(std::move(name));
  }

 private:
  static std::unique_ptr<Work> done() {
    return std::make_unique<CompletedWork>();
  }
  // in may equal out (e.g. a reduce to the root in place).
  static std::unique_ptr<Work> copy(
      const float* in, float* out, int64_t count) {
    if (in != out)
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
