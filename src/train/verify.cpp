#include "train/verify.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>

#include "comm/process_group.h"
#include "ops/ops.h"
#include "train/data_source.h"
#include "train/engine.h"

namespace ndt {
namespace {

std::string layout_name(const Config& c) {
  const ParallelConfig& p = c.parallel;
  char buf[200];
  if (p.pp > 1 || p.tp > 1) {
    std::snprintf(
        buf,
        sizeof buf,
        "dp=%d pp=%d tp=%d%s schedule=%s microbatches=%d chunks=%d "
        "recompute=%s",
        p.dp,
        p.pp,
        p.tp,
        p.tp_seq ? " (sequence-split regions)" : "",
        to_string(p.schedule),
        p.microbatches,
        p.pp_chunks,
        to_string(p.recompute));
  } else {
    std::snprintf(
        buf,
        sizeof buf,
        "dp=%d (%s) grad_accum=%d",
        p.dp,
        to_string(p.dp_mode),
        p.grad_accum);
  }
  return buf;
}

// Sums (or maxes) v over every rank of the job.
void reduce_job(const Groups& g, double* v, int n, ReduceOp op) {
  if (g.dp != nullptr)
    g.dp->all_reduce(v, n, op);
  if (g.pp != nullptr)
    g.pp->all_reduce(v, n, op);
  if (g.tp != nullptr)
    g.tp->all_reduce(v, n, op);
}

}  // namespace

VerifyReport run_verify(
    const Config& config, const Groups& groups, std::ostream& out) {
  const int threads =
      config.train.threads > 0 ? config.train.threads : omp_get_num_procs();
  ops::set_num_threads(threads);
  Config serial = config;
  serial.parallel = ParallelConfig();
  const int64_t steps = std::min(config.verify.steps, config.train.steps);

  DataSource data(config);
  Engine ref(serial, data, Groups());
  Engine par(config, data, groups);

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
  // Each rank compares the parameters it holds with the same block of the
  // serial tensor; data-parallel replicas hold whole copies, pipeline ranks
  // their chunks' parameters, tensor-parallel ranks their shards.
  auto pa = ref.model().parameters();
  std::map<std::string, Parameter*> held;
  for (Parameter* p : par.model().parameters())
    held[p->name] = p;
  int worst = -1;
  for (size_t i = 0; i < pa.size(); ++i) {
    auto it = held.find(pa[i]->name);
    if (it == held.end())
      continue;
    const Tensor serial = it->second->layout.take_local(pa[i]->value);
    const float* x = serial.data();
    const float* y = it->second->value.data();
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < serial.numel(); ++j) {
      double d = double(x[j]) - y[j];
      diff += d * d;
      norm += double(x[j]) * x[j];
    }
    double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    if (rel >= rep.max_param_rel) {
      rep.max_param_rel = rel;
      worst = static_cast<int>(i);
    }
  }
  // The job's worst tensor: the largest difference, then (ties) the largest
  // index among the ranks that saw it.
  double v[1] = {rep.max_param_rel};
  reduce_job(groups, v, 1, ReduceOp::kMax);
  double w[1] = {rep.max_param_rel == v[0] ? double(worst) : -1.0};
  rep.max_param_rel = v[0];
  reduce_job(groups, w, 1, ReduceOp::kMax);
  if (w[0] >= 0)
    rep.worst_param = pa[static_cast<size_t>(w[0])]->name;
  // Every rank must agree.
  rep.pass = rep.max_loss_rel <= kVerifyLossRtol &&
             rep.max_param_rel <= kVerifyParamRtol;
  double f[1] = {rep.pass ? 0.0 : 1.0};
  reduce_job(groups, f, 1, ReduceOp::kMax);
  rep.pass = f[0] == 0.0;
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
