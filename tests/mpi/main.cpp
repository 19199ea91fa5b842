// Entry point of test_mpi, run under mpirun at several rank counts. Rank 0
// prints the usual gtest output; other ranks print only their failures,
// prefixed "[rank R]". After the tests all ranks agree on the outcome, so
// every rank (and mpirun) exits non-zero when any rank failed; a rank that
// cannot reach that agreement (a peer hung or died) calls MPI_Abort.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mpi_env.h"

namespace ndt::test {
namespace {

MpiProcessGroup* g_world = nullptr;

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  // (UnitTest::current_test_info() would deadlock inside OnTestPartResult.)
  void OnTestStart(const testing::TestInfo& info) override {
    info_ = &info;
  }
  void OnTestEnd(const testing::TestInfo& /*info*/) override {
    info_ = nullptr;
  }
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed())
      return;
    const testing::TestInfo* info = info_;
    std::string prefix = "[rank " + std::to_string(rank_) + "] ";
    std::string text = prefix + result.message();
    for (size_t i = text.find('\n'); i != std::string::npos;
         i = text.find('\n', i + 1)) {
      text.insert(i + 1, prefix);
    }
    std::fprintf(
        stderr,
        "%sFAILED %s.%s at %s:%d\n%s\n",
        prefix.c_str(),
        info ? info->test_suite_name() : "?",
        info ? info->name() : "?",
        result.file_name() ? result.file_name() : "?",
        result.line_number(),
        text.c_str());
  }

 private:
  int rank_;
  const testing::TestInfo* info_ = nullptr;
};

}  // namespace

MpiProcessGroup& mpi_world() {
  return *g_world;
}

}  // namespace ndt::test

int main(int argc, char** argv) {
  ndt::MpiRuntime mpi(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const int rank = mpi.world_rank();
  float failed = 0;
  {
    auto world = mpi.world();
    world->set_timeout_s(30);
    ndt::test::g_world = world.get();
    if (rank != 0) {
      auto& listeners = testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new ndt::test::RankFailurePrinter(rank));
    }
    failed = RUN_ALL_TESTS() != 0 ? 1.0f : 0.0f;
    try {
      world->all_reduce(&failed, 1, ndt::ReduceOp::kMax);
    } catch (const std::exception& e) {
      // A peer is stuck or gone: MPI_Finalize would wait for it forever.
      std::fprintf(stderr, "[rank %d] final agreement: %s\n", rank, e.what());
      std::fflush(stderr);
      ndt::MpiRuntime::abort(1);
      return 1;
    }
    ndt::test::g_world = nullptr;
  }
  if (failed != 0 && rank == 0) {
    std::fprintf(stderr, "test_mpi: a test failed on at least one rank\n");
  }
  return failed != 0 ? 1 : 0;
}
