#include "train/run_checkpoint.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "io/checkpoint.h"
#include "io/untrusted.h"

namespace ndt {
namespace {

constexpr int kTagCheckpoint = 4;

// The global tensor of `local` (a block of p's layout, e.g. p's value or
// one of its optimizer states), gathered over the mesh axes that shard p
// to the rank with coordinate 0 on them; collective over those axes. On
// the other ranks an undefined tensor; for whole blocks, `local`.
Tensor gather_global(const Parameter& p, const Tensor& local, Mesh& mesh) {
  std::vector<std::string> axes;
  for (const Placement& pl : p.layout.placements) {
    if (pl.kind == Placement::Kind::kShard)
      axes.push_back(pl.axis);
  }
  if (axes.empty())
    return local;
  ProcessGroup& g = axes.size() == 1 ? mesh.group(axes[0]) : mesh.group(axes);
  const int n = g.size();
  Tensor blocks({n * local.numel()}, MemTag::kComm);
  g.all_gather(local.data(), blocks.data(), local.numel());
  if (g.rank() != 0)
    return Tensor();
  std::vector<int> sizes;
  for (const std::string& a : axes)
    sizes.push_back(mesh.size(a));
  Tensor global(p.layout.global_shape, MemTag::kComm);
  for (int q = 0; q < n; ++q) {
    const std::vector<int> coords = mesh_coords(q, sizes);
    Layout lq = p.layout;
    for (Placement& pl : lq.placements) {
      for (size_t i = 0; i < axes.size(); ++i) {
        if (pl.axis == axes[i])
          pl.index = coords[i];
      }
    }
    lq.put_local(blocks.slice(q * local.numel(), local.shape()), global);
  }
  return global;
}

// Whether this rank writes its pipeline stage's share: coordinate 0 on
// every axis but the pipeline's (data-parallel replicas are identical,
// shards were gathered to coordinate 0).
bool writes_stage(Mesh& mesh) {
  for (const std::string& a : mesh.names()) {
    if (a != "pp" && mesh.coord(a) != 0)
      return false;
  }
  return true;
}

// A checkpoint tensor's header entry as training needs it: F32 and of
// the parameter's global shape. `what` precedes the name in the message:
// " tensor '" or ": optimizer state '".
void check_tensor_spec(
    const TensorSpec& spec,
    const Shape& shape,
    const char* what,
    const std::string& dir) {
  NDT_CHECK(
      spec.dtype == DType::kF32,
      CheckpointError,
      "checkpoint ",
      dir,
      " tensor '",
      spec.name,
      "' has dtype I32; parameters and optimizer states must be F32");
  NDT_CHECK(
      spec.shape == shape,
      CheckpointError,
      "checkpoint ",
      dir,
      what,
      spec.name,
      "' has shape ",
      shape_str(spec.shape),
      ", expected ",
      shape_str(shape));
}

// A checkpoint tensor's values as training uses them: finite.
void check_tensor_values(
    const Tensor& t, const std::string& name, const std::string& dir) {
  const float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) {
    NDT_CHECK(
        std::isfinite(p[i]),
        CheckpointError,
        "checkpoint ",
        dir,
        " tensor '",
        name,
        "' holds ",
        p[i],
        " at element ",
        i,
        "; a checkpoint must hold finite values");
  }
}

// Settings that change what a run computes. Resuming under different
// values would silently continue another run; layout and bookkeeping
// settings (parallel.*, train.steps, logging, run.*) may change.
void check_same_run(
    const Config& config, const Config& saved, const std::string& dir) {
  const nlohmann::json want = config_to_json(config);
  const nlohmann::json have = config_to_json(saved);
  std::vector<std::string> differ;
  for (const char* section : {"model", "data", "optim"}) {
    for (const auto& [leaf, value] : have[section].items()) {
      if (want[section][leaf] != value) {
        differ.push_back(detail::str_cat(
            section,
            ".",
            leaf,
            ": checkpoint ",
            json_excerpt(value),
            ", config ",
            json_excerpt(want[section][leaf])));
      }
    }
  }
  for (const char* leaf : {"seed", "batch_size"}) {
    if (want["train"][leaf] != have["train"][leaf]) {
      differ.push_back(detail::str_cat(
          "train.",
          leaf,
          ": checkpoint ",
          have["train"][leaf].dump(),
          ", config ",
          want["train"][leaf].dump()));
    }
  }
  if (differ.empty())
    return;
  std::string list;
  for (const std::string& d : differ)
    list += "\n  " + d;
  throw ConfigError(detail::str_cat(
      "cannot resume from checkpoint ",
      dir,
      ": it was trained with other settings (resuming needs the same "
      "model, data, optim, train.seed and train.batch_size):",
      list));
}

// Whether this rank gathers p's shards: coordinate 0 on every axis but the
// pipeline's and those that shard p (the ranks of one group of those axes).
bool gathers(const Parameter& p, Mesh& mesh) {
  for (const std::string& a : mesh.names()) {
    if (a == "pp" || mesh.coord(a) == 0)
      continue;
    bool shards = false;
    for (const Placement& pl : p.layout.placements)
      shards = shards || (pl.axis == a && pl.kind == Placement::Kind::kShard);
    if (!shards)
      return false;
  }
  return true;
}

// p's value and then its optimizer states (in state_suffixes() order),
// whole, on the rank with coordinate 0 on every axis but the pipeline's
// (the stage's writer); undefined elsewhere. Collective over the ranks of
// p's pipeline stage: under ZeRO the states (stage 3: and the value) come
// from p's owner to rank 0 of the data-parallel group, then shards are
// gathered over the axes that shard p.
std::vector<Tensor> whole_tensors(
    Parameter& p,
    Engine& engine,
    const std::vector<std::string>& suffixes,
    const std::map<std::string, Tensor>& state) {
  Mesh& mesh = engine.mesh();
  const DistributedDataParallel* ddp = engine.ddp();
  const bool sharded = ddp && ddp->shards_optimizer();
  const int owner = sharded ? ddp->owner(p) : 0;
  std::vector<Tensor> local;
  if (!sharded || owner == ddp->group().rank()) {
    local.push_back(p.value);
    for (const std::string& suffix : suffixes)
      local.push_back(state.at(p.name + suffix));
  }
  if (sharded) {
    ProcessGroup& g = ddp->group();
    // Stage 3: the value moves too; stages 1 and 2 replicate it.
    const size_t first = ddp->zero_stage() == 3 ? 0 : 1;
    if (owner != 0 && g.rank() == owner) {
      for (size_t i = first; i < local.size(); ++i)
        g.send(local[i].data(), local[i].numel(), 0, kTagCheckpoint);
      return {};
    }
    if (owner != 0 && g.rank() == 0) {
      local.push_back(
          first == 0 ? Tensor(p.value.shape(), MemTag::kComm) : p.value);
      for (size_t i = 0; i < suffixes.size(); ++i)
        local.emplace_back(p.value.shape(), MemTag::kComm);
      for (size_t i = first; i < local.size(); ++i)
        g.recv(local[i].data(), local[i].numel(), owner, kTagCheckpoint);
    }
    if (g.rank() != 0)
      return {};
  }
  if (!gathers(p, mesh))
    return {};
  std::vector<Tensor> whole;
  for (const Tensor& t : local)
    whole.push_back(gather_global(p, t, mesh));
  if (!writes_stage(mesh))
    return {};
  return whole;
}

}  // namespace

std::string save_run_checkpoint(
    const Config& config, Engine& engine, int64_t step) {
  Mesh& mesh = engine.mesh();
  Optimizer& opt = engine.optimizer();
  const std::vector<std::string> suffixes = opt.state_suffixes();
  std::map<std::string, Parameter*> held;
  for (Parameter* p : engine.model().parameters())
    held[p->name] = p;
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : opt.state())
    state[name] = t;
  ProcessGroup& pp = mesh.group("pp");
  const int me = mesh.coord("pp");
  const bool root = writes_stage(mesh) && me == 0;
  std::unique_ptr<CheckpointWriter> out;
  int64_t n_params = 0;
  if (root) {
    std::vector<TensorSpec> model, optimizer;
    for (const ParamInfo& info : engine.all_parameters()) {
      model.push_back({info.name, DType::kF32, info.shape});
      for (const std::string& suffix : suffixes)
        optimizer.push_back({info.name + suffix, DType::kF32, info.shape});
      n_params += shape_numel(info.shape);
    }
    out = std::make_unique<CheckpointWriter>(
        config.run_dir() + "/checkpoints",
        step,
        std::move(model),
        std::move(optimizer));
  }
  // One parameter at a time, in the model's order: its stage makes it
  // whole, the stage's writer sends it to the job's first rank, which
  // appends it to the files. No rank holds more than one whole parameter
  // with its states.
  for (const ParamInfo& info : engine.all_parameters()) {
    std::vector<Tensor> whole;
    if (info.pp_rank == me)
      whole = whole_tensors(*held.at(info.name), engine, suffixes, state);
    if (!root) {
      for (const Tensor& t : whole)
        pp.send(t.data(), t.numel(), 0, kTagCheckpoint);
      continue;
    }
    if (info.pp_rank != 0) {
      whole.clear();
      for (size_t i = 0; i <= suffixes.size(); ++i) {
        whole.emplace_back(info.shape, MemTag::kComm);
        pp.recv(
            whole.back().data(),
            whole.back().numel(),
            info.pp_rank,
            kTagCheckpoint);
      }
    }
    out->write_model(whole[0]);
    for (size_t i = 1; i < whole.size(); ++i)
      out->write_optimizer(whole[i]);
  }
  if (!root)
    return "";
  nlohmann::json manifest;
  manifest["config"] = config_to_json(config);
  manifest["model"] = {{"kind", engine.model().kind}, {"parameters", n_params}};
  manifest["optimizer"] = {
      {"name", to_string(config.optim.name)}, {"step", opt.step_count()}};
  manifest["data"] = {
      {"samples_seen", step * config.train.batch_size},
      {"seed", config.train.seed}};
  return out->finish(std::move(manifest));
}

int64_t load_run_checkpoint(
    const Config& config, const std::string& dir, Engine& engine) {
  // Tensor by tensor: no rank holds more than one whole tensor at a time
  // besides its own parameters and state.
  const CheckpointReader ck(dir);
  const nlohmann::json& m = ck.manifest();
  const std::string manifest = dir + "/manifest.json";
  NDT_CHECK(
      m.contains("config") && m["config"].is_object(),
      CheckpointError,
      "checkpoint ",
      manifest,
      " has no \"config\" object");
  NDT_CHECK(
      m.contains("optimizer") && m["optimizer"].is_object() &&
          m["optimizer"].contains("step") &&
          m["optimizer"]["step"].is_number_integer(),
      CheckpointError,
      "checkpoint ",
      manifest,
      " has no integer \"optimizer\": {\"step\": n}");
  // load_checkpoint checked "step" >= 0. The optimizer takes one step per
  // training step, so the two counts agree in every checkpoint written.
  const int64_t step = m["step"].get<int64_t>();
  const nlohmann::json& opt_step = m["optimizer"]["step"];
  const bool same_step = opt_step.is_number_unsigned()
                             ? opt_step.get<uint64_t>() == uint64_t(step)
                             : opt_step.get<int64_t>() == step;
  NDT_CHECK(
      same_step,
      CheckpointError,
      "checkpoint ",
      manifest,
      " has optimizer.step ",
      json_excerpt(opt_step),
      " but step ",
      step,
      "; they must be equal");
  Config saved;
  try {
    saved = config_from_json(m["config"]);
  } catch (const ConfigError& e) {
    throw CheckpointError(detail::str_cat(
        "checkpoint ",
        manifest,
        " stores an invalid config (not your config file): ",
        e.what()));
  }
  check_same_run(config, saved, dir);
  const SafetensorsReader& model = ck.model();
  const auto& all = engine.all_parameters();
  NDT_CHECK(
      model.tensors().size() == all.size(),
      CheckpointError,
      "checkpoint ",
      dir,
      " has ",
      model.tensors().size(),
      " model tensors, the model has ",
      all.size());
  // Names and shapes from the header first, then each tensor's values.
  std::vector<size_t> index;
  for (const ParamInfo& info : all) {
    const int64_t i = model.find(info.name);
    NDT_CHECK(
        i >= 0,
        CheckpointError,
        "checkpoint ",
        dir,
        " lacks tensor '",
        info.name,
        "'");
    check_tensor_spec(model.tensors()[i], info.shape, " tensor '", dir);
    index.push_back(static_cast<size_t>(i));
  }
  // Every rank checks every model tensor (so all stop on a bad one) and
  // takes its block of those it holds (layout.take_local: the whole
  // tensor, or its tensor-parallel shard).
  std::map<std::string, Parameter*> held;
  for (Parameter* p : engine.model().parameters())
    held[p->name] = p;
  for (size_t j = 0; j < all.size(); ++j) {
    const Tensor t = model.read(index[j]);
    check_tensor_values(t, all[j].name, dir);
    auto it = held.find(all[j].name);
    if (it != held.end())
      it->second->value.copy_(it->second->layout.take_local(t));
  }
  if (engine.ddp())
    engine.ddp()->values_written();
  // The optimizer's own parameters: all of them, or under ZeRO
  // those this rank updates; each state tensor read and copied in before
  // the next.
  const SafetensorsReader& states = ck.optimizer();
  std::map<std::string, const Parameter*> state_of;
  for (const Parameter* p : engine.optimizer().parameters()) {
    for (const std::string& suffix : engine.optimizer().state_suffixes())
      state_of[p->name + suffix] = p;
  }
  engine.optimizer().load_state(
      [&](const std::string& name) {
        const Parameter* p = state_of.at(name);
        const int64_t i = states.find(name);
        NDT_CHECK(
            i >= 0,
            CheckpointError,
            "checkpoint ",
            dir,
            ": optimizer state is missing '",
            name,
            "'");
        check_tensor_spec(
            states.tensors()[i],
            p->layout.global_shape,
            ": optimizer state '",
            dir);
        const Tensor t = states.read(static_cast<size_t>(i));
        check_tensor_values(t, name, dir);
        return p->layout.take_local(t);
      },
      step);
  return step;
}

}  // namespace ndt
