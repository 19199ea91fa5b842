#include "train/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <thread>

#include "base/check.h"
#include "comm/process_group.h"
#include "comm/self_process_group.h"
#include "ops/ops.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/engine.h"
#include "train/factory.h"

namespace ndt {
namespace {

std::string layout_name(const Config& c) {
  const ParallelConfig& p = c.parallel;
  char buf[200];
  if (p.pp > 1 || p.tp > 1) {
    std::snprintf(
        buf,
        sizeof buf,
        "dp=%d pp=%d tp=%d (%s%s) schedule=%s microbatches=%d chunks=%d "
        "recompute=%s",
        p.dp,
        p.pp,
        p.tp,
        p.tp > 1 ? to_string(p.tp_mode) : "none",
        p.tp_seq ? ", sequence-split regions" : "",
        to_string(p.schedule),
        p.microbatches,
        p.pp_chunks,
        to_string(p.recompute));
  } else {
    std::snprintf(
        buf,
        sizeof buf,
        "dp=%d (%s) microbatches=%d",
        p.dp,
        to_string(p.dp_mode),
        p.microbatches);
  }
  std::string out = buf;
  if (p.zero > 0)
    out += " zero=" + std::to_string(p.zero);
  if (p.sp > 1)
    out += " sp=" + std::to_string(p.sp) + " (" + to_string(p.sp_attention) +
           " attention)";
  return out;
}

// |b - a| / |a|; NaN when either is NaN, so that `!(rel <= tol)` fails.
double rel_diff(double a, double b) {
  return std::fabs(b - a) / std::max(std::fabs(a), 1e-30);
}

bool finite(double x) {
  return std::isfinite(x);
}

bool all_finite(const Tensor& t) {
  const float* x = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(x[i]))
      return false;
  }
  return true;
}

// Per serial tensor, the sums one comparison contributes on one rank,
// reduced over the job (kSums doubles per tensor, then one for the count
// of parameters the serial model does not have).
enum Sum {
  kDiff2,          // sum of (layout - serial)^2 over held elements
  kNorm2,          // sum of serial^2 over the same elements
  kCount,          // elements counted once across the job (owner replicas)
  kBadSerial,      // non-finite serial elements
  kBadLayout,      // non-finite layout elements
  kShapeMismatch,  // global or local shape differs from the serial one
  kSums
};

// Does this rank count its block of `p` towards the job-wide element
// count? Shards are counted once each: a replica counts only where its
// coordinate on every axis that replicates p is 0. `partition`: the ranks
// of the gradient sync's axes hold disjoint parameters (ZeRO), so
// only the other replica axes (tensor-parallel ones) hold copies.
bool counts_elements(
    const Parameter& p, const Engine& engine, Mesh& mesh, bool partition) {
  const std::vector<std::string>& sync = engine.grad_axes();
  for (const std::string& axis : engine.replica_axes(p)) {
    if (partition && std::find(sync.begin(), sync.end(), axis) != sync.end())
      continue;
    if (mesh.coord(axis) != 0)
      return false;
  }
  return true;
}

// The serial model's parameters as a build describes them (names, global
// shapes), in the order of Model::parameters(): every rank knows them
// without holding the serial model (each module is freed as soon as it is
// built).
std::vector<ParamDesc> describe_serial(const Config& serial) {
  SerialBuilder builder;
  const std::unique_ptr<Model> described =
      make_model(serial.model, builder, keep_no_module);
  std::vector<ParamDesc> out;
  for (const std::vector<ParamDesc>& m : described->described_modules())
    out.insert(out.end(), m.begin(), m.end());
  return out;
}

// The names and shapes of the serial parameters, which the layout's
// parameters are compared with.
class Comparison {
 public:
  // serial: the serial model's parameters (describe_serial); layout: the
  // engine whose parameters are compared, on `mesh`.
  Comparison(
      const std::vector<ParamDesc>& serial, const Engine& layout, Mesh& mesh)
      : layout_(layout), mesh_(mesh) {
    for (size_t i = 0; i < serial.size(); ++i) {
      index_[serial[i].name] = static_cast<int>(i);
      names_.push_back(serial[i].name);
      shapes_.push_back(serial[i].global_shape);
    }
  }

  int size() const {
    return static_cast<int>(names_.size());
  }
  const std::string& name(int i) const {
    return names_[i];
  }
  const Shape& shape(int i) const {
    return shapes_[i];
  }
  int64_t numel(int i) const {
    return shape_numel(shapes_[i]);
  }
  // The serial tensor of `name`, or -1.
  int index(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }
  // Names a parameter of the layout that the serial model lacks, once.
  void report_extra(const std::string& name) const {
    if (reported_.insert(name).second) {
      std::cerr << "verify: the layout has parameter '" << name
                << "' that the serial model does not have\n";
    }
  }
  const Engine& layout() const {
    return layout_;
  }
  Mesh& mesh() const {
    return mesh_;
  }

  // Sums over every rank of the job.
  void reduce(std::vector<double>& s) const {
    mesh_.world().all_reduce(s.data(), static_cast<int64_t>(s.size()));
  }

 private:
  const Engine& layout_;
  Mesh& mesh_;
  std::map<std::string, int> index_;
  std::vector<std::string> names_;
  std::vector<Shape> shapes_;
  mutable std::set<std::string> reported_;  // extra parameters named
};

// One side's sums against the serial run on this rank, filled serial
// tensor by serial tensor (add) as they arrive.
class Tally {
 public:
  // `mine[h]` is the tensor of parameter held[h] (its gradient, or its
  // value). `partition`: the `held` lists of the replicas partition the
  // parameters (ZeRO's, each held by the rank that updates it), so
  // copies exist only over the tensor-parallel axes.
  Tally(
      const Comparison& cmp,
      std::vector<Parameter*> held,
      std::vector<Tensor> mine,
      bool partition = false)
      : cmp_(cmp),
        held_(std::move(held)),
        mine_(std::move(mine)),
        partition_(partition),
        blocks_(size_t(cmp.size())),
        sums_(size_t(cmp.size()) * kSums + 1, 0.0) {
    NDT_ASSERT(mine_.size() == held_.size(), "one tensor per held parameter");
    for (size_t h = 0; h < held_.size(); ++h) {
      const Parameter& p = *held_[h];
      const int i = cmp.index(p.name);
      if (i >= 0) {
        blocks_[size_t(i)].push_back(h);
        continue;
      }
      cmp.report_extra(p.name);
      if (counts(p))
        sums_.back() += 1;
    }
  }

  // Serial tensor i: its sums against the blocks of it this side holds.
  void add(int i, const Tensor& serial) {
    double* v = &sums_[size_t(i) * kSums];
    if (!all_finite(serial))
      v[kBadSerial] = 1;
    for (size_t h : blocks_[size_t(i)]) {
      const Parameter& p = *held_[h];
      if (p.layout.global_shape != cmp_.shape(i) ||
          mine_[h].shape() != p.layout.local_shape()) {
        v[kShapeMismatch] = 1;
        continue;
      }
      if (!all_finite(mine_[h]))
        v[kBadLayout] = 1;
      const Tensor ref = p.layout.take_local(serial);
      const float* x = ref.data();
      const float* y = mine_[h].data();
      for (int64_t j = 0; j < ref.numel(); ++j) {
        const double d = double(y[j]) - x[j];
        v[kDiff2] += d * d;
        v[kNorm2] += double(x[j]) * x[j];
      }
      if (counts(p))
        v[kCount] += double(ref.numel());
    }
  }

  // kSums per serial tensor, then the count of parameters the serial
  // model lacks.
  const std::vector<double>& sums() const {
    return sums_;
  }

 private:
  bool counts(const Parameter& p) const {
    return counts_elements(p, cmp_.layout(), cmp_.mesh(), partition_);
  }

  const Comparison& cmp_;
  std::vector<Parameter*> held_;
  std::vector<Tensor> mine_;
  bool partition_;
  std::vector<std::vector<size_t>> blocks_;  // per serial tensor: in held_
  std::vector<double> sums_;
};

// ||layout - serial|| / ||serial|| of tensor i from reduced sums (0 when
// both are zero; NaN propagates).
double tensor_rel(const std::vector<double>& s, int i) {
  const double d = s[size_t(i) * kSums + kDiff2];
  const double n = s[size_t(i) * kSums + kNorm2];
  if (d == 0)
    return 0;
  return std::sqrt(d) / std::max(std::sqrt(n), 1e-30);
}

// The values, or gradients, of `params`: the tensors themselves, or
// copies (`copy`) that later steps leave as they are.
std::vector<Tensor> values_of(
    const std::vector<Parameter*>& params, bool copy = false) {
  std::vector<Tensor> out;
  for (Parameter* p : params)
    out.push_back(copy ? p->value.clone(MemTag::kOther) : p->value);
  return out;
}

std::vector<Tensor> grads_of(
    const std::vector<Parameter*>& params, bool copy = false) {
  std::vector<Tensor> out;
  for (Parameter* p : params)
    out.push_back(copy ? p->grad.clone(MemTag::kOther) : p->grad);
  return out;
}

// Keeps e's gradients of every step, before its update, in `out` (which
// must outlive e's steps).
void keep_grads(Engine& e, std::vector<Tensor>& out) {
  out = grads_of(e.model().parameters(), true);
  e.on_grads_ready = [&e, &out] {
    const std::vector<Parameter*> params = e.model().parameters();
    for (size_t i = 0; i < params.size(); ++i)
      out[i].copy_(params[i]->grad);
  };
}

// The floor runs: the serial layout summing in other orders; per tensor
// the larger of their differences counts. One run takes one sample per
// micro-batch, the other (for an even batch of at least 4) two. Each
// changes the summation of every parameter gradient over the batch in its
// own way, and either can miss a sum: a row-sum gradient (biases,
// LayerNorm) adds fixed chunks of rows (ops' kSumRows) that two samples
// can fill exactly, so that its micro-batches add the very chunk partials
// of the serial run in the same order, while a gradient summed over
// samples (positions) adds one sample at a time in the serial run, as one
// sample per micro-batch does. Their steps also run every
// GEMM on the other GEMM library (FloorGemm), which orders each dot
// product's K terms differently: a layout that splits K (row-parallel 1D,
// 2D, 2.5D, 3D) changes the forward and input-gradient sums, which the
// micro-batches alone leave bitwise equal where a library's rows do not
// depend on M (oneDNN with AVX-512 kernels), so the floor would miss that
// noise.
std::vector<Config> floor_configs(const Config& serial) {
  const int64_t B = serial.train.batch_size;
  std::vector<Config> out(B % 2 == 0 && B >= 4 ? 2 : 1, serial);
  out[0].parallel.microbatches = static_cast<int>(B);
  if (out.size() == 2)
    out[1].parallel.microbatches = static_cast<int>(B / 2);
  return out;
}

ops::GemmBackend floor_gemm(ops::GemmBackend serial) {
  return serial == ops::GemmBackend::kOneDnn ? ops::GemmBackend::kOpenBlas
                                             : ops::GemmBackend::kOneDnn;
}

// Runs the floor's GEMMs on the other library while alive. The floor step
// runs alone (no layout or serial step at the same time), so switching the
// process's library for its duration affects nothing else.
class FloorGemm {
 public:
  FloorGemm() : saved_(ops::gemm_backend()) {
    ops::set_gemm_backend(floor_gemm(saved_));
  }
  ~FloorGemm() {
    ops::set_gemm_backend(saved_);
  }
  FloorGemm(const FloorGemm&) = delete;
  FloorGemm& operator=(const FloorGemm&) = delete;

 private:
  ops::GemmBackend saved_;
};

// Which side of the comparison holds a non-finite value.
std::string sides(bool serial_bad, bool layout_bad) {
  return serial_bad && layout_bad ? "serial and layout"
         : serial_bad             ? "serial"
                                  : "layout";
}

// The larger of a and b; NaN when either is.
double worse(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
}

// Per entry, the worst over `runs` consecutive blocks of `per` entries
// each (one block per floor run).
std::vector<double> worst_of_runs(const double* v, int runs, int per) {
  std::vector<double> out(size_t(per), 0.0);
  for (int k = 0; k < runs; ++k) {
    for (int i = 0; i < per; ++i)
      out[i] = worse(out[i], v[size_t(k) * per + i]);
  }
  return out;
}

// Rank 0's values of xs on every rank of `world`.
void share_from_rank0(ProcessGroup& world, const std::vector<double*>& xs) {
  std::vector<double> v;
  for (const double* x : xs)
    v.push_back(*x);
  world.share_from_rank0(v.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < xs.size(); ++i)
    *xs[i] = v[i];
}

// The serial run's step on every rank of `world`, one parameter at a
// time: rank 0 stepped it (`ref`, null elsewhere) and sends each
// parameter's gradient (`grads[i]`, before the update) and updated value;
// every rank passes them to use(i, gradient, value) in the order of
// `serial`. So a rank other than 0 holds one parameter's pair at a time,
// not the serial model.
void stream_serial_step(
    const std::vector<ParamDesc>& serial,
    Engine* ref,
    const std::vector<Tensor>& grads,
    ProcessGroup& world,
    const std::function<void(int, const Tensor&, const Tensor&)>& use) {
  std::vector<Parameter*> params;
  if (ref != nullptr)
    params = ref->model().parameters();
  for (size_t i = 0; i < serial.size(); ++i) {
    Tensor g, v;
    if (ref != nullptr) {
      g = grads[i];
      v = params[i]->value;
    } else {
      g = Tensor(serial[i].global_shape, MemTag::kOther);
      v = Tensor(serial[i].global_shape, MemTag::kOther);
    }
    if (world.size() > 1) {
      world.broadcast(g.data(), g.numel(), 0);
      world.broadcast(v.data(), v.numel(), 0);
    }
    use(static_cast<int>(i), g, v);
  }
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

// "verify: memory peak per rank ...": every rank's peak of ndtrain's
// allocator during this verify's runs, gathered over `world`, and where
// the serial and floor runs ran. The dataset is left out: loaded before
// the runs and unchanged by them, it is counted where it was decoded into
// the allocator's memory but not where it is mapped from the decode
// cache.
std::string memory_line(ProcessGroup& world, int nfloors) {
  std::vector<double> peaks(size_t(world.size()), 0.0);
  const MemoryStats mem = memory_stats();
  peaks[size_t(world.rank())] = double(
      mem.total_peak_bytes -
      mem.current_bytes[static_cast<int>(MemTag::kData)]);
  world.all_reduce(peaks.data(), static_cast<int64_t>(peaks.size()));
  std::string line = "verify: memory peak per rank (MiB):";
  for (double b : peaks)
    line += fmt(" %.1f", b / (1 << 20));
  if (world.size() == 1)
    return line + " (serial and floor runs)\n";
  line += " (serial run on rank 0, floor runs on rank";
  line += nfloors > 1 ? "s" : "";
  for (int k = 0; k < nfloors; ++k)
    line += (k > 0 ? ", " : " ") + std::to_string((k + 1) % world.size());
  return line + ")\n";
}

}  // namespace

int64_t verify_eval_samples(const Config& config) {
  const int64_t unit = config.parallel.dp * micro_batch_size(config);
  return std::max<int64_t>(1, kVerifyEvalSamples / unit) * unit;
}

VerifyReport run_verify(const Config& config, Mesh& mesh, std::ostream& out) {
  const int threads = train_threads(config);
  ops::set_num_threads(threads);
  Config layout = config;
  layout.train.eval_samples = verify_eval_samples(config);
  Config serial = layout;
  serial.parallel = ParallelConfig();
  const std::vector<Config> floor_cfgs = floor_configs(serial);
  std::string floor_mbs;  // "16 and 8"
  for (const Config& c : floor_cfgs) {
    floor_mbs += (floor_mbs.empty() ? "" : " and ") +
                 std::to_string(c.parallel.microbatches);
  }
  const int64_t steps = std::min(config.verify.steps, config.train.steps);
  // The serial run steps on rank 0 only and sends its results one
  // parameter at a time (stream_serial_step); floor run k on rank (k + 1)
  // mod the job's size, so that the floors run beside each other and the
  // serial run.
  const int ranks = mesh.world().size();
  const bool serial_rank = mesh.rank() == 0;
  const int nfloors = static_cast<int>(floor_cfgs.size());

  DataSource data(config);
  std::vector<std::string> serial_axes;
  for (const MeshAxis& a : mesh_axes(serial))
    serial_axes.push_back(a.name);
  SingleRankMesh ref_mesh(serial_axes), floor_mesh(serial_axes);
  // Every rank knows the serial parameters' names and shapes; rank 0
  // alone builds the serial model.
  const std::vector<ParamDesc> serial_params = describe_serial(serial);
  int64_t serial_numel = 0;
  for (const ParamDesc& d : serial_params)
    serial_numel += shape_numel(d.global_shape);
  std::unique_ptr<Engine> ref;
  if (serial_rank) {
    ref = std::make_unique<Engine>(serial, data, ref_mesh.mesh());
    const std::vector<Parameter*> params = ref->model().parameters();
    NDT_ASSERT(
        params.size() == serial_params.size(),
        "the serial model has the parameters its description lists");
    for (size_t i = 0; i < params.size(); ++i) {
      NDT_ASSERT(
          params[i]->name == serial_params[i].name &&
              params[i]->layout.global_shape == serial_params[i].global_shape,
          "the serial model has the parameters its description lists");
    }
  }
  // floors[k]: floor run k where this rank runs it, else null.
  std::vector<std::unique_ptr<Engine>> floors(floor_cfgs.size());
  for (int k = 0; k < nfloors; ++k) {
    if ((k + 1) % ranks == mesh.rank()) {
      floors[k] =
          std::make_unique<Engine>(floor_cfgs[k], data, floor_mesh.mesh());
    }
  }
  Engine par(layout, data, mesh);
  // The memory line's peaks: what the engines hold and the runs add.
  memory_reset_peaks();

  out << "verify: " << to_string(config.model.kind) << " (" << serial_numel
      << " parameters), layout " << layout_name(config) << " vs serial, "
      << steps << " steps, global batch " << config.train.batch_size
      << "; noise floor: serial with microbatches=" << floor_mbs << " on "
      << ops::to_string(floor_gemm(ops::gemm_backend())) << "'s GEMM\n";
  VerifyReport rep;
  // Each failure once; the per-step ones in full at their first step,
  // then counted.
  std::map<std::string, int> repeats;
  auto fail = [&rep](const std::string& what) { rep.failures.push_back(what); };
  auto fail_step = [&](const std::string& kind, const std::string& what) {
    if (repeats[kind]++ == 0)
      fail(what);
  };
  const Comparison cmp(serial_params, par, mesh);
  const int n = cmp.size();
  const size_t m = size_t(n) * kSums + 1;
  // Under ZeRO a gradient is final on the rank that updates it only, and
  // the values of the others may still be on their way into the next
  // forward (stages 1 and 2; stage 3 holds no others): each rank compares
  // the parameters it updates.
  const bool sharded = par.ddp() && par.ddp()->shards_optimizer();
  const std::vector<Parameter*> compared =
      sharded ? par.optimizer().parameters() : par.model().parameters();

  // The layout trains its steps back to back, as in training, with no
  // communication of the comparison between them (a collective there
  // could complete transfers a step started and the next one must wait
  // for); each rank keeps copies of what it compares.
  struct LayoutStep {
    StepResult result;
    std::vector<Tensor> grads;   // before the optimizer step
    std::vector<Tensor> values;  // after it
  };
  std::vector<LayoutStep> layout_steps(static_cast<size_t>(steps));
  LayoutStep* current = nullptr;
  par.on_grads_ready = [&] { current->grads = grads_of(compared, true); };
  for (int64_t s = 0; s < steps; ++s) {
    if (s > 0) {
      // Ranks start the step one after another (in rank order, then in
      // reverse), so that a rank reading another's transfer without
      // waiting for it reads before it arrives.
      const int r = s % 2 == 1 ? mesh.rank() : ranks - 1 - mesh.rank();
      std::this_thread::sleep_for(r * kVerifyStagger);
    }
    current = &layout_steps[size_t(s)];
    current->result = par.step(s);
    NDT_ASSERT(
        current->grads.size() == compared.size(),
        "the layout's gradients were not seen before the optimizer step");
    current->values = values_of(compared, true);
  }
  par.on_grads_ready = nullptr;

  // The serial run, step by step against the layout's: rank 0 steps it,
  // floor run k steps on its rank, then every rank compares what it holds
  // with the serial tensors as rank 0 sends them (stream_serial_step).
  // The serial gradients of the step (rank 0) and each floor run's (its
  // rank), before the update.
  std::vector<Tensor> grads_ref;
  if (ref != nullptr)
    keep_grads(*ref, grads_ref);
  std::vector<std::vector<Tensor>> floor_grads(floors.size());
  for (int k = 0; k < nfloors; ++k) {
    if (floors[k] != nullptr)
      keep_grads(*floors[k], floor_grads[k]);
  }
  std::vector<double> grad_sums, value_sums;
  // Per floor run k, block k: its final parameters against the serial
  // run's, per tensor (filled at the last step on its rank).
  std::vector<double> fl_runs(size_t(nfloors) * n, 0.0);
  int64_t compared_elements = 0;
  bool stopped = false;
  for (int64_t s = 0; s < steps; ++s) {
    StepResult a;
    if (ref != nullptr)
      a = ref->step(s);
    std::vector<StepResult> floor_results(floors.size());
    for (int k = 0; k < nfloors; ++k) {
      if (floors[k] == nullptr)
        continue;
      FloorGemm other;
      floor_results[k] = floors[k]->step(s);
    }
    share_from_rank0(mesh.world(), {&a.loss, &a.grad_norm});
    const bool last = s + 1 == steps;
    const LayoutStep& ls = layout_steps[size_t(s)];
    Tally grads(cmp, compared, ls.grads, sharded);
    Tally values(cmp, compared, ls.values, sharded);
    std::vector<std::optional<Tally>> floor_grad(floors.size());
    std::vector<std::optional<Tally>> floor_value(floors.size());
    for (int k = 0; k < nfloors; ++k) {
      if (floors[k] == nullptr)
        continue;
      const std::vector<Parameter*> params = floors[k]->model().parameters();
      floor_grad[k].emplace(cmp, params, floor_grads[k]);
      if (last)
        floor_value[k].emplace(cmp, params, values_of(params));
    }
    stream_serial_step(
        serial_params,
        ref.get(),
        grads_ref,
        mesh.world(),
        [&](int i, const Tensor& g, const Tensor& v) {
          grads.add(i, g);
          values.add(i, v);
          for (int k = 0; k < nfloors; ++k) {
            if (floor_grad[k])
              floor_grad[k]->add(i, g);
            if (floor_value[k])
              floor_value[k]->add(i, v);
          }
        });
    // Each floor run's differences from the serial one at this step, in
    // block k of n + 2 for floor run k: per gradient tensor, then loss and
    // gradient norm (zeros on the ranks that do not run it).
    std::vector<double> floor_step(size_t(nfloors) * (n + 2), 0.0);
    for (int k = 0; k < nfloors; ++k) {
      if (floors[k] == nullptr)
        continue;
      double* v = &floor_step[size_t(k) * (n + 2)];
      for (int i = 0; i < n; ++i)
        v[i] = tensor_rel(floor_grad[k]->sums(), i);
      v[n] = rel_diff(a.loss, floor_results[k].loss);
      v[n + 1] = rel_diff(a.grad_norm, floor_results[k].grad_norm);
      for (int i = 0; last && i < n; ++i)
        fl_runs[size_t(k) * n + i] = tensor_rel(floor_value[k]->sums(), i);
    }
    const StepResult& b = ls.result;
    grad_sums = grads.sums();
    value_sums = values.sums();
    // One reduction per step: gradient sums, value sums, the floor, and
    // whether each side's loss and gradient norm are finite.
    std::vector<double> all = grad_sums;
    all.insert(all.end(), value_sums.begin(), value_sums.end());
    all.insert(all.end(), floor_step.begin(), floor_step.end());
    all.push_back(finite(a.loss) ? 0 : 1);
    all.push_back(finite(b.loss) ? 0 : 1);
    all.push_back(finite(a.grad_norm) ? 0 : 1);
    all.push_back(finite(b.grad_norm) ? 0 : 1);
    cmp.reduce(all);
    grad_sums.assign(all.begin(), all.begin() + m);
    value_sums.assign(all.begin() + m, all.begin() + 2 * m);
    // Per gradient tensor, then loss and gradient norm: the worst floor run.
    const std::vector<double> floor_worst_run =
        worst_of_runs(&all[2 * m], nfloors, n + 2);
    const double* fl = floor_worst_run.data();
    const double* flags = &all[2 * m + size_t(nfloors) * (n + 2)];

    const double loss_rel = rel_diff(a.loss, b.loss);
    const double gn_rel = rel_diff(a.grad_norm, b.grad_norm);
    // Gradient tolerance: at step 0 both sides hold the same parameters,
    // so only reduction order differs; later the parameters carry the
    // optimizer's amplified noise, which the floor run measures.
    auto grad_tol = [&](int i) {
      return s == 0 ? kVerifyRtol : kVerifyRtol + kVerifyFloorFactor * fl[i];
    };
    double worst_ratio = 0;
    int worst = -1;
    for (int i = 0; i < n; ++i) {
      const double x = tensor_rel(grad_sums, i);
      if (!(x / grad_tol(i) <= worst_ratio)) {
        worst_ratio = x / grad_tol(i);
        worst = i;
      }
    }
    const double worst_rel = worst >= 0 ? tensor_rel(grad_sums, worst) : 0;
    rep.loss_serial.push_back(a.loss);
    rep.loss_layout.push_back(b.loss);
    char line[400];
    std::snprintf(
        line,
        sizeof line,
        "verify: step %lld loss serial %.8f layout %.8f rel diff %.2e | "
        "grad norm serial %.6e layout %.6e rel diff %.2e | gradients: "
        "closest to tolerance %s rel diff %.2e (tolerance %.2e)\n",
        static_cast<long long>(s),
        a.loss,
        b.loss,
        loss_rel,
        a.grad_norm,
        b.grad_norm,
        gn_rel,
        worst >= 0 ? cmp.name(worst).c_str() : "-",
        worst_rel,
        worst >= 0 ? grad_tol(worst) : kVerifyRtol);
    out << line;

    // Non-finite values: name the first, stop comparing.
    const std::string at = " at step " + std::to_string(s);
    auto first_bad = [&](const std::vector<double>& v, const char* what) {
      for (int i = 0; i < n; ++i) {
        const double sb = v[size_t(i) * kSums + kBadSerial];
        const double lb = v[size_t(i) * kSums + kBadLayout];
        if (sb > 0 || lb > 0) {
          fail(
              "non-finite " + std::string(what) + " of " + cmp.name(i) + at +
              " (" + sides(sb > 0, lb > 0) + ")");
          return true;
        }
      }
      return false;
    };
    if (flags[0] > 0 || flags[1] > 0) {
      fail(
          "non-finite loss" + at + " (" + sides(flags[0] > 0, flags[1] > 0) +
          ")");
      stopped = true;
    } else if (flags[2] > 0 || flags[3] > 0) {
      fail(
          "non-finite gradient norm" + at + " (" +
          sides(flags[2] > 0, flags[3] > 0) + ")");
      stopped = true;
    } else {
      stopped = first_bad(grad_sums, "gradient") ||
                first_bad(value_sums, "parameter value after the update");
    }
    if (stopped)
      break;

    // Completeness, once: every element of every serial tensor covered
    // once, shapes equal, no parameter the serial model lacks.
    if (s == 0) {
      for (int i = 0; i < n; ++i) {
        const double* v = &grad_sums[size_t(i) * kSums];
        compared_elements += static_cast<int64_t>(v[kCount]);
        if (v[kShapeMismatch] > 0) {
          fail("parameter " + cmp.name(i) + ": shape differs from serial");
        } else if (v[kCount] == 0) {
          fail("parameter " + cmp.name(i) + " is held by no rank");
        } else if (v[kCount] != double(cmp.numel(i))) {
          fail(
              "parameter " + cmp.name(i) + ": the layout covers " +
              std::to_string(int64_t(v[kCount])) + " elements, serial has " +
              std::to_string(cmp.numel(i)));
        }
      }
      if (grad_sums.back() > 0) {
        fail(
            std::to_string(int64_t(grad_sums.back())) +
            " parameter(s) of the layout are not in the serial model (named "
            "on stderr)");
      }
    }

    // The floor run must itself be the serial run up to summation order.
    double floor_worst = worse(fl[n], fl[n + 1]);
    for (int i = 0; s == 0 && i < n; ++i)
      floor_worst = worse(floor_worst, fl[i]);
    if (!(floor_worst <= kVerifyRtol)) {
      fail_step(
          "floor",
          "a floor run (serial, microbatches=" + floor_mbs +
              ") differs from the serial run" + at + " by " +
              fmt("%.2e", floor_worst) +
              " in loss, gradient norm or (step 0) a gradient");
    }

    // A scalar of the step (relative difference `rel`, largest so far in
    // `max`) against kVerifyRtol.
    auto check_scalar = [&](const std::string& what, double rel, double& max) {
      max = std::max(max, rel);
      if (!(rel <= kVerifyRtol)) {
        max = rel;  // NaN stays
        fail_step(
            what,
            what + " differs" + at + " (rel diff " + fmt("%.2e", rel) +
                ", tolerance " + fmt("%.0e", kVerifyRtol) + ")");
      }
    };
    check_scalar("loss", loss_rel, rep.max_loss_rel);
    check_scalar("gradient norm", gn_rel, rep.max_grad_norm_rel);
    if (worst >= 0 && !(worst_rel <= rep.max_grad_rel)) {
      rep.max_grad_rel = worst_rel;
      rep.worst_grad = cmp.name(worst) + at;
    }
    if (!(worst_ratio <= 1)) {
      fail_step(
          "gradient",
          "gradient of " + cmp.name(worst) + " differs" + at + " (rel diff " +
              fmt("%.2e", worst_rel) + ", tolerance " +
              fmt("%.2e", grad_tol(worst)) + ")");
    }
  }

  if (!stopped) {
    // Final parameters against the floor runs' (per tensor the larger;
    // block k from floor run k's rank, zeros elsewhere).
    mesh.world().all_reduce(
        fl_runs.data(), static_cast<int64_t>(fl_runs.size()));
    const std::vector<double> fl = worst_of_runs(fl_runs.data(), nfloors, n);
    double worst_ratio = 0;
    int worst = -1;
    for (int i = 0; i < n; ++i) {
      const double x = tensor_rel(value_sums, i);
      const double tol = kVerifyFloorFactor * fl[i] + kVerifyParamAtol;
      if (!(x / tol <= worst_ratio)) {
        worst_ratio = x / tol;
        worst = i;
      }
      rep.max_param_rel = std::max(rep.max_param_rel, x);
    }
    if (worst >= 0) {
      const double x = tensor_rel(value_sums, worst);
      const double tol = kVerifyFloorFactor * fl[worst] + kVerifyParamAtol;
      rep.worst_param = cmp.name(worst);
      char line[300];
      std::snprintf(
          line,
          sizeof line,
          "verify: parameters after %lld steps: closest to tolerance %s rel "
          "diff %.2e, floor %.2e (tolerance %.0f x floor + %.0e = %.2e)\n",
          static_cast<long long>(steps),
          cmp.name(worst).c_str(),
          x,
          fl[worst],
          kVerifyFloorFactor,
          kVerifyParamAtol,
          tol);
      out << line;
      if (!(worst_ratio <= 1)) {
        fail(
            "parameter " + cmp.name(worst) + " differs after " +
            std::to_string(steps) + " steps (rel diff " + fmt("%.2e", x) +
            ", tolerance " + fmt("%.2e", tol) + ")");
      }
    }

    // Evaluation on a fixed subset.
    EvalResult ea;
    if (serial_rank)
      ea = ref->evaluate(steps);
    double ea_samples = double(ea.samples);
    share_from_rank0(mesh.world(), {&ea.loss, &ea.accuracy, &ea_samples});
    ea.samples = static_cast<int64_t>(ea_samples);
    const EvalResult eb = par.evaluate(steps);
    rep.eval_loss_rel = rel_diff(ea.loss, eb.loss);
    char line[300];
    std::snprintf(
        line,
        sizeof line,
        "verify: evaluation (%lld samples) loss serial %.8f layout %.8f rel "
        "diff %.2e, accuracy serial %.4f%% layout %.4f%%\n",
        static_cast<long long>(ea.samples),
        ea.loss,
        eb.loss,
        rep.eval_loss_rel,
        100 * ea.accuracy,
        100 * eb.accuracy);
    out << line;
    if (!finite(ea.loss) || !finite(eb.loss)) {
      fail(
          "non-finite evaluation loss (" +
          sides(!finite(ea.loss), !finite(eb.loss)) + ")");
    } else if (!(rep.eval_loss_rel <= kVerifyRtol)) {
      fail(
          "evaluation loss differs (rel diff " +
          fmt("%.2e", rep.eval_loss_rel) + ", tolerance " +
          fmt("%.0e", kVerifyRtol) + ")");
    }
    if (!(ea.accuracy == eb.accuracy))
      fail("evaluation accuracy differs");
  }

  char line[400];
  std::snprintf(
      line,
      sizeof line,
      "verify: max rel diff: loss %.2e, grad norm %.2e (tolerance %.0e "
      "each), gradients %.2e (%s), parameters %.2e; %lld of %lld parameter "
      "elements compared\n",
      rep.max_loss_rel,
      rep.max_grad_norm_rel,
      kVerifyRtol,
      rep.max_grad_rel,
      rep.worst_grad.empty() ? "-" : rep.worst_grad.c_str(),
      rep.max_param_rel,
      static_cast<long long>(compared_elements),
      static_cast<long long>(serial_numel));
  out << line;
  out << memory_line(mesh.world(), nfloors);
  for (const auto& [kind, count] : repeats) {
    if (count > 1) {
      rep.failures.push_back(
          kind + " also differs at " + std::to_string(count - 1) +
          " later step(s)");
    }
  }
  // Every rank must agree.
  double f[1] = {rep.failures.empty() ? 0.0 : 1.0};
  mesh.world().all_reduce(f, 1, ReduceOp::kMax);
  rep.pass = f[0] == 0.0;
  if (rep.pass) {
    out << "verify: PASS\n";
  } else {
    for (const std::string& w : rep.failures)
      out << "verify: " << w << "\n";
    if (rep.failures.empty())
      out << "verify: another rank found a difference\n";
    out << "verify: FAIL\n";
  }
  return rep;
}

}  // namespace ndt
