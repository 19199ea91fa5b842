// `ndtrain verify`: trains verify.steps steps with the configured layout
// and with the serial layout (same seed, same global batch) and compares,
// at every step, the loss, the global gradient norm (before clipping) and
// every parameter's gradient before the optimizer touches it; after the
// last step the evaluation on a fixed subset and every parameter. This is
// the check a user runs to trust a layout (DESIGN.md principle 1).
//
// The rules (fp32 reduction order is the only allowed difference):
//   - anything non-finite on either side (loss, gradient norm, a gradient or
//     parameter element, the evaluation) fails, naming the first step and
//     tensor; every comparison is written so that NaN fails;
//   - loss, gradient norm, evaluation loss: relative difference <=
//     kVerifyRtol; each gradient tensor: ||g_layout - g_serial||_2 /
//     ||g_serial||_2 <= kVerifyRtol (a gradient is linear in the loss
//     scale, so a gradient off by a constant factor shows here whatever
//     the optimizer); evaluation accuracy: the same number of correct
//     predictions;
//   - final parameters, per tensor: rel_layout <= kVerifyFloorFactor *
//     rel_floor + kVerifyParamAtol, where rel_floor is the largest of the
//     same relative L2 differences between the serial run and the floor
//     runs, serial runs that sum in other orders (the measured noise
//     floor: one sample per micro-batch, and for an even batch of at least
//     4 also two; Adam-type updates turn
//     reduction-order noise in near-cancelling gradient elements into steps
//     of the size of the learning rate, so no fixed tolerance fits every
//     tensor);
//   - the comparison is complete: every serial parameter is compared as a
//     whole (the shards held across the job cover each element exactly
//     once), shapes match, and a missing or extra parameter fails by name.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "io/config.h"

namespace ndt {

constexpr double kVerifyRtol = 1e-5;
// Between the starts of two ranks' steps (run_verify).
constexpr std::chrono::milliseconds kVerifyStagger(2);
constexpr double kVerifyFloorFactor = 10;
constexpr double kVerifyParamAtol = 1e-6;
// Evaluation samples compared (the first of the evaluation set): about
// this many, whole micro-batches on every data-parallel rank
// (verify_eval_samples).
constexpr int64_t kVerifyEvalSamples = 256;

// kVerifyEvalSamples rounded down to a multiple of parallel.dp x the
// micro-batch (at least one), so that every rank's evaluation batches
// split as its training micro-batches do (a remainder batch might not:
// an odd one under 1D's sequence-split regions of the ViT's 17 tokens).
int64_t verify_eval_samples(const Config& config);

struct VerifyReport {
  std::vector<double> loss_serial;
  std::vector<double> loss_layout;
  double max_loss_rel = 0;
  double max_grad_norm_rel = 0;
  double max_grad_rel = 0;
  std::string worst_grad;
  double eval_loss_rel = 0;
  double max_param_rel = 0;
  std::string worst_param;
  std::vector<std::string> failures;  // empty when the layout passes
  bool pass = false;
};

// The layout first trains its steps back to back, as in training (no
// communication of verify's between them, which could complete a
// transfer the layout forgot to wait for); before each step after the
// first the ranks start one after another, kVerifyStagger apart (in rank
// order, then in reverse), so that a rank reading another's transfer
// without waiting for it reads before it arrives. Each rank keeps copies
// of the gradients and values it compares, per step. Then world rank 0
// trains the serial reference (it needs the whole global batch, so keep
// verify models small; the other ranks never build it) and floor run k
// trains on world rank (k + 1) mod the job's size; after each step rank 0
// broadcasts its loss and gradient norm, then each parameter's gradient
// and updated value in turn. Each rank compares the block of every
// parameter it holds with the same block of the serial tensor as it
// arrives; the sums are reduced over the job, so every rank reaches the
// same verdict. The report ends with every rank's memory peak (ndtrain's
// allocator) during the verify.
// mesh: the job's mesh, with the axes of mesh_axes(config).
VerifyReport run_verify(const Config& config, Mesh& mesh, std::ostream& out);

}  // namespace ndt
