// `ndtrain verify`: trains verify.steps steps with the configured layout
// and with the serial layout (same seed, same global batch) and compares
// the per-step loss and the final parameters gathered to global shape.
// This is the check a user runs to trust a layout (DESIGN.md principle 1).
//
// Tolerances (fp32 reduction order is the only allowed difference):
//   per-step loss:   |loss_layout - loss_serial| <= kVerifyLossRtol *
//   |loss_serial| final params:    ||p_layout - p_serial||_2 / ||p_serial||_2
//                    <= kVerifyParamRtol, per tensor
// The parameter check uses the L2 norm per tensor rather than the largest
// element: Adam-type updates divide by sqrt(v), so an element whose
// gradient is a near-cancelling sum (|g| ~ eps) can move by a fraction of
// lr under any change of summation order, while the tensor as a whole
// agrees to ~1e-7.
#pragma once

#include <iosfwd>
#include <vector>

#include "io/config.h"
#include "train/groups.h"

namespace ndt {

constexpr double kVerifyLossRtol = 1e-5;
constexpr double kVerifyParamRtol = 1e-5;

struct VerifyReport {
  std::vector<double> loss_serial;
  std::vector<double> loss_layout;
  double max_loss_rel = 0;
  double max_param_rel = 0;
  std::string worst_param;
  bool pass = false;
};

// Every rank runs the serial reference too (it needs the whole global
// batch, so keep verify models small) and compares the parameters it holds
// (a pipeline rank: its chunks'); the worst difference is reduced over the
// job.
VerifyReport run_verify(
    const Config& config, const Groups& groups, std::ostream& out);

}  // namespace ndt
