#include "train/verify.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <ostream>

#include "comm/process_group.h"
#include "ops/ops.h"
#include "train/data_source.h"
#include "train/engine.h"

namespace ndt {
namespace {

std::string layout_name(const Config& c) {
  char buf[128];
  std::snprintf(
      buf,
      sizeof buf,
      "dp=%d (%s) grad_accum=%d",
      c.parallel.dp,
      to_string(c.parallel.dp_mode),
      c.parallel.grad_accum);
  return buf;
}

}  // namespace

VerifyReport run_verify(
    const Config& config, ProcessGroup* dp_group, std::ostream& out) {
  const int threads =
      config.train.threads > 0 ? config.train.threads : omp_get_num_procs();
  ops::set_num_threads(threads);
  Config serial = config;
  serial.parallel = ParallelConfig();
  const int64_t steps = std::min(config.verify.steps, config.train.steps);

  DataSource data(config);
  Engine ref(serial, data, nullptr);
  Engine par(config, data, dp_group);

  out << "verify: " << config.model.dim << "-dim "
      << to_string(config.model.kind) << ", layout " << layout_name(config)
      << " vs serial, " << steps << " steps, global batch "
      << config.train.batch_size << "\n";
  VerifyReport rep;
  for (int64_t s = 0; s < steps; ++s) {
    double a = ref.step(s).loss;
    double b = par.step(s).loss;
    double rel = std::fabs(b - a) / std::max(std::fabs(a), 1e-30);
    rep.loss_serial.push_back(a);
    rep.loss_layout.push_back(b);
    rep.max_loss_rel = std::max(rep.max_loss_rel, rel);
    char line[160];
    std::snprintf(
        line,
        sizeof line,
        "verify: step %lld loss serial %.8f layout %.8f rel diff "
        "%.2e\n",
        static_cast<long long>(s),
        a,
        b,
        rel);
    out << line;
  }
  // Data-parallel parameters are replicated: the local copy is the global
  // tensor.
  auto pa = ref.model().parameters();
  auto pb = par.model().parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const float* x = pa[i]->value.data();
    const float* y = pb[i]->value.data();
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < pa[i]->value.numel(); ++j) {
      double d = double(x[j]) - y[j];
      diff += d * d;
      norm += double(x[j]) * x[j];
    }
    double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    if (rel >= rep.max_param_rel) {
      rep.max_param_rel = rel;
      rep.worst_param = pa[i]->name;
    }
  }
  rep.pass = rep.max_loss_rel <= kVerifyLossRtol &&
             rep.max_param_rel <= kVerifyParamRtol;
  if (dp_group != nullptr) {
    // Every rank must agree (and so must every replica's parameters).
    double v[1] = {rep.pass ? 0.0 : 1.0};
    dp_group->all_reduce(v, 1, ReduceOp::kMax);
    rep.pass = v[0] == 0.0;
  }
  char line[200];
  std::snprintf(
      line,
      sizeof line,
      "verify: max loss rel diff %.2e (tolerance %.0e), max param "
      "rel diff %.2e in %s (tolerance %.0e)\n",
      rep.max_loss_rel,
      kVerifyLossRtol,
      rep.max_param_rel,
      rep.worst_param.c_str(),
      kVerifyParamRtol);
  out << line << (rep.pass ? "verify: PASS" : "verify: FAIL") << "\n";
  return rep;
}

}  // namespace ndt
