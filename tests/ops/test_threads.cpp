// Thread-count control and the BLAS identification string.
#include <gtest/gtest.h>
#include <omp.h>
#include <xmmintrin.h>

#include <atomic>
#include <cfloat>

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

// flush_denormals: after it, a product whose exact result is subnormal is
// zero and a subnormal operand reads as zero, on the calling thread and on
// threads the OpenMP pool already had; MXCSR is restored afterwards.
TEST(Threads, FlushDenormalsReachesThePool) {
  const int threads = ops::num_threads();
  ops::set_num_threads(3);
  std::atomic<int> seen{0};
#pragma omp parallel
  seen += 1;  // the pool's threads exist before the call
  ASSERT_EQ(seen.load(), 3);
  const unsigned saved = _mm_getcsr();
  volatile float tiny = FLT_MIN, half = 0.5f;
  EXPECT_GT(tiny * half, 0.0f);  // IEEE default: a subnormal
  ops::flush_denormals();
  EXPECT_TRUE(ops::denormals_flushed());
  std::atomic<int> flushed{0}, zero{0};
#pragma omp parallel
  {
    flushed += ops::denormals_flushed() ? 1 : 0;
    volatile float sub = FLT_MIN / 4;  // constant-folded, stored subnormal
    zero += (tiny * half == 0.0f && sub * 1.0f == 0.0f) ? 1 : 0;
  }
  EXPECT_EQ(flushed.load(), 3);
  EXPECT_EQ(zero.load(), 3);
#pragma omp parallel
  _mm_setcsr(saved);
  _mm_setcsr(saved);
  EXPECT_FALSE(ops::denormals_flushed());
  ops::set_num_threads(threads);
}

}  // namespace
}  // namespace ndt
