// Thread-count control and the BLAS identification string.
#include <gtest/gtest.h>

#include "base/error.h"
#include "ops/ops.h"

namespace ndt {
namespace {

TEST(Threads, SetNumThreadsRoundTrips) {
  const int before = ops::num_threads();
  ops::set_num_threads(1);
  EXPECT_EQ(ops::num_threads(), 1);
  ops::set_num_threads(2);
  EXPECT_EQ(ops::num_threads(), 2);
  ops::set_num_threads(before);
  EXPECT_EQ(ops::num_threads(), before);
}

TEST(Threads, RejectsNonPositiveCount) {
  EXPECT_THROW(ops::set_num_threads(0), ConfigError);
}

TEST(Threads, BlasInfoNamesOpenBlasOpenMpBuild) {
  const std::string info = ops::blas_info();
  EXPECT_EQ(
      info.rfind(std::string("gemm=") + to_string(ops::gemm_backend()), 0), 0u)
      << info;
  EXPECT_NE(info.find("oneDNN "), std::string::npos) << info;
  EXPECT_NE(info.find("OpenBLAS "), std::string::npos) << info;
  EXPECT_NE(info.find("(openmp)"), std::string::npos) << info;
  EXPECT_NE(info.find("core="), std::string::npos) << info;
}

}  // namespace
}  // namespace ndt
