// Medians of measured times: of a list, and of a few timed calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace ndt {

// The median of v (not empty); the mean of the two middle values when
// their number is even.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds of `runs` (>= 1) calls of f after one untimed call.
template <class F>
double median_seconds(int runs, F&& f) {
  f();
  std::vector<double> s;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  return median(std::move(s));
}

}  // namespace ndt
