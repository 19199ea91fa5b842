// The machine measurements' timer: the median wall time of a few calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace ndt {

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
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

}  // namespace ndt
