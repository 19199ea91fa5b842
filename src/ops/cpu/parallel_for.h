// detail::parallel_for: a loop split over the OpenMP threads only when that
// is asked for.
//
// `#pragma omp parallel for if (false)` still opens a parallel region:
// libgomp builds a team of one thread and ends it at a barrier whose last
// arrival wakes the others with a futex system call, whether there are
// others or not. Once per op that costs nothing; attention's per-head loops
// run thousands of times per step inside attention's own region over heads,
// where they are never split, and there the regions of one thread took
// 7-8% of the Fashion-MNIST ViT's step and 2% of the benchmark ViT's
// (docs/performance.md, "Regions of one thread"). Internal to src/ops/cpu.
#pragma once

#include <cstdint>

namespace ndt::ops::detail {

// f(i) for i in [0, n): split statically over the threads when `threaded`,
// otherwise in order on the calling thread without an OpenMP region.
template <class F>
void parallel_for(bool threaded, int64_t n, const F& f) {
  if (threaded) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      f(i);
  } else {
    for (int64_t i = 0; i < n; ++i)
      f(i);
  }
}

}  // namespace ndt::ops::detail
