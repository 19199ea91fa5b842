#include "plan/link_cost.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace ndt {

double all_reduce_seconds(const LinkCost& link, int ranks, int64_t bytes) {
  const double rounds = 2.0 * (ranks - 1);
  return rounds * link.alpha_s +
         rounds / ranks * static_cast<double>(bytes) * link.beta_s_per_byte;
}

namespace {

double max_rel_error(
    const LinkCost& link,
    int ranks,
    const std::vector<int64_t>& bytes,
    const std::vector<double>& seconds) {
  double worst = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double t = all_reduce_seconds(link, ranks, bytes[i]);
    worst = std::max(worst, std::fabs(t - seconds[i]) / seconds[i]);
  }
  return worst;
}

}  // namespace

LinkFit fit_link_cost(
    int ranks,
    const std::vector<int64_t>& bytes,
    const std::vector<double>& seconds) {
  NDT_CHECK(
      ranks >= 2,
      ConfigError,
      "a link cost needs 2 or more ranks, got ",
      ranks);
  NDT_CHECK(
      bytes.size() == seconds.size(),
      ConfigError,
      "link fit: ",
      bytes.size(),
      " sizes but ",
      seconds.size(),
      " times");
  for (size_t i = 0; i < bytes.size(); ++i) {
    NDT_CHECK(
        bytes[i] > 0 && seconds[i] > 0,
        ConfigError,
        "link fit: size ",
        bytes[i],
        " B took ",
        seconds[i],
        " s (both must be > 0)");
  }
  // t = a x + b y with x = 2 (p - 1), y = 2 (p - 1) / p * bytes; weighted
  // least squares with weights 1 / t^2 (relative error): solve the 2 x 2
  // normal equations.
  const double x = 2.0 * (ranks - 1);
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double y = x / ranks * static_cast<double>(bytes[i]);
    const double w = 1.0 / (seconds[i] * seconds[i]);
    sxx += w * x * x;
    sxy += w * x * y;
    syy += w * y * y;
    sxt += w * x * seconds[i];
    syt += w * y * seconds[i];
  }
  const double det = sxx * syy - sxy * sxy;
  NDT_CHECK(
      det > 1e-12 * sxx * syy,
      ConfigError,
      "link fit: needs all-reduce times at two different sizes or more");
  LinkCost link{(syy * sxt - sxy * syt) / det, (sxx * syt - sxy * sxt) / det};
  // A negative coefficient: the best fit with it at 0 (one parameter).
  if (link.alpha_s < 0)
    link = {0, syt / syy};
  if (link.beta_s_per_byte < 0)
    link = {sxt / sxx, 0};
  return {link, max_rel_error(link, ranks, bytes, seconds)};
}

}  // namespace ndt
