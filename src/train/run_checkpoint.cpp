#include "train/run_checkpoint.h"

#include <cmath>
#include <map>
#include <vector>

#include "base/check.h"
#include "io/checkpoint.h"
#include "io/untrusted.h"

namespace ndt {
namespace {

constexpr int kTagCheckpoint = 4;

// The optimizer's state tensors per parameter, in the order state()
// lists them: k consecutive entries "<param name>.<suffix>" per parameter.
int states_per_param(const NamedState& state, size_t params) {
  if (params == 0)
    return 0;  // a stage of parameter-free blocks (dropout)
  NDT_ASSERT(state.size() % params == 0);
  return static_cast<int>(state.size() / params);
}

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

// A checkpoint tensor as training uses it: F32 and finite.
void check_tensor_values(
    const Tensor& t, const std::string& name, const std::string& dir) {
  NDT_CHECK(
      t.dtype() == DType::kF32,
      CheckpointError,
      "checkpoint ",
      dir,
      " tensor '",
      name,
      "' has dtype I32; parameters and optimizer states must be F32");
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

// ZeRO: each parameter's optimizer state (stage 3: and its value) lives
// on the data-parallel rank that updates it. Collective over that group:
// on its rank 0 every parameter's states in the model's order (what
// state() lists without sharding), elsewhere nothing; under stage 3 each
// parameter's value (named as the parameter) before its states.
NamedState gather_sharded_state(Engine& engine) {
  const DistributedDataParallel& ddp = *engine.ddp();
  ProcessGroup& g = ddp.group();
  Optimizer& opt = engine.optimizer();
  std::vector<std::string> suffixes = opt.state_suffixes();
  std::map<std::string, Tensor> mine;
  for (auto& [name, t] : opt.state())
    mine[name] = t;
  if (ddp.zero_stage() == 3) {
    suffixes.insert(suffixes.begin(), "");
    for (Parameter* p : opt.parameters())
      mine[p->name] = p->value;
  }
  NamedState out;
  for (Parameter* p : engine.model().parameters()) {
    const int owner = ddp.owner(*p);
    for (const std::string& suffix : suffixes) {
      const std::string name = p->name + suffix;
      if (g.rank() == 0 && owner == 0) {
        out.emplace_back(name, mine.at(name));
      } else if (g.rank() == 0) {
        Tensor t(p->value.shape(), MemTag::kComm);
        g.recv(t.data(), t.numel(), owner, kTagCheckpoint);
        out.emplace_back(name, t);
      } else if (owner == g.rank()) {
        const Tensor& t = mine.at(name);
        g.send(t.data(), t.numel(), 0, kTagCheckpoint);
      }
    }
  }
  return out;
}

}  // namespace

std::string save_run_checkpoint(
    const Config& config, Engine& engine, int64_t step) {
  Mesh& mesh = engine.mesh();
  Optimizer& opt = engine.optimizer();
  const bool sharded = engine.ddp() && engine.ddp()->shards_optimizer();
  NamedState state = sharded ? gather_sharded_state(engine) : opt.state();
  // Data-parallel replicas are identical: replica 0's pipeline writes.
  if (mesh.coord("dp") != 0)
    return "";
  Model& model = engine.model();
  auto params = model.parameters();
  // ZeRO stage 3: the values came with the states (on the writing ranks).
  std::vector<Tensor> held;
  for (Parameter* p : params)
    held.push_back(p->value);
  if (sharded && engine.ddp()->zero_stage() == 3 && !state.empty()) {
    const size_t per = state.size() / params.size();
    NamedState states;
    for (size_t i = 0; i < params.size(); ++i) {
      held[i] = state[i * per].second;
      for (size_t j = 1; j < per; ++j)
        states.push_back(state[i * per + j]);
    }
    state = std::move(states);
  }
  const int k = states_per_param(state, params.size());
  // Whole tensors first: shards gathered to coordinate 0 of the axes that
  // shard them; only the stage's writer goes on.
  std::vector<Tensor> values;
  for (size_t i = 0; i < params.size(); ++i) {
    values.push_back(gather_global(*params[i], held[i], mesh));
    for (int j = 0; j < k; ++j) {
      state[i * k + j].second =
          gather_global(*params[i], state[i * k + j].second, mesh);
    }
  }
  if (!writes_stage(mesh))
    return "";
  ProcessGroup& pp = mesh.group("pp");
  if (pp.rank() > 0) {
    // Per held parameter, in serial order: its value, then its k states.
    for (size_t i = 0; i < params.size(); ++i) {
      pp.send(values[i].data(), values[i].numel(), 0, kTagCheckpoint);
      for (int j = 0; j < k; ++j) {
        const Tensor& t = state[i * k + j].second;
        pp.send(t.data(), t.numel(), 0, kTagCheckpoint);
      }
    }
    return "";
  }
  // Suffixes of the state tensors, from this rank's first parameter.
  std::vector<std::string> suffixes;
  for (int j = 0; j < k; ++j)
    suffixes.push_back(state[j].first.substr(params[0]->name.size()));
  std::map<std::string, Tensor> mine_value, mine_state;
  for (size_t i = 0; i < params.size(); ++i) {
    mine_value[params[i]->name] = values[i];
    for (int j = 0; j < k; ++j)
      mine_state[state[i * k + j].first] = state[i * k + j].second;
  }
  Checkpoint ck;
  const int P = pp.size();
  for (int q = 0; q < P; ++q) {
    for (const ParamInfo& info : engine.all_parameters()) {
      if (info.pp_rank != q)
        continue;
      if (q == 0) {
        ck.model.push_back({info.name, mine_value.at(info.name)});
        for (const std::string& suf : suffixes) {
          ck.optimizer.push_back(
              {info.name + suf, mine_state.at(info.name + suf)});
        }
        continue;
      }
      Tensor v(info.shape, MemTag::kComm);
      pp.recv(v.data(), v.numel(), q, kTagCheckpoint);
      ck.model.push_back({info.name, v});
      for (const std::string& suf : suffixes) {
        Tensor t(info.shape, MemTag::kComm);
        pp.recv(t.data(), t.numel(), q, kTagCheckpoint);
        ck.optimizer.push_back({info.name + suf, t});
      }
    }
  }
  int64_t n_params = 0;
  for (const ParamInfo& info : engine.all_parameters())
    n_params += shape_numel(info.shape);
  ck.manifest["config"] = config_to_json(config);
  ck.manifest["model"] = {{"kind", model.kind}, {"parameters", n_params}};
  ck.manifest["optimizer"] = {
      {"name", to_string(config.optim.name)}, {"step", opt.step_count()}};
  ck.manifest["data"] = {
      {"samples_seen", step * config.train.batch_size},
      {"seed", config.train.seed}};
  return save_checkpoint(config.run_dir() + "/checkpoints", step, ck);
}

int64_t load_run_checkpoint(
    const Config& config, const std::string& dir, Engine& engine) {
  Checkpoint ck = load_checkpoint(dir);
  const nlohmann::json& m = ck.manifest;
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
  std::map<std::string, const Tensor*> tensors;
  for (const NamedTensor& t : ck.model)
    tensors[t.name] = &t.tensor;
  const auto& all = engine.all_parameters();
  NDT_CHECK(
      tensors.size() == all.size(),
      CheckpointError,
      "checkpoint ",
      dir,
      " has ",
      tensors.size(),
      " model tensors, the model has ",
      all.size());
  for (const ParamInfo& info : all) {
    auto it = tensors.find(info.name);
    NDT_CHECK(
        it != tensors.end(),
        CheckpointError,
        "checkpoint ",
        dir,
        " lacks tensor '",
        info.name,
        "'");
    check_tensor_values(*it->second, info.name, dir);
    NDT_CHECK(
        it->second->shape() == info.shape,
        CheckpointError,
        "checkpoint ",
        dir,
        " tensor '",
        info.name,
        "' has shape ",
        shape_str(it->second->shape()),
        ", expected ",
        shape_str(info.shape));
  }
  // Each rank takes its block of every tensor it holds (layout.take_local:
  // the whole tensor, or its tensor-parallel shard).
  auto params = engine.model().parameters();
  for (Parameter* p : params)
    p->value.copy_(p->layout.take_local(*tensors.at(p->name)));
  if (engine.ddp())
    engine.ddp()->values_written();
  std::map<std::string, const Tensor*> saved_state;
  for (const NamedTensor& t : ck.optimizer)
    saved_state[t.name] = &t.tensor;
  // The optimizer's own parameters: all of them, or under ZeRO
  // those this rank updates.
  NamedState mine = engine.optimizer().state();
  params = engine.optimizer().parameters();
  const int k = states_per_param(mine, params.size());
  NamedState state;
  for (size_t i = 0; i < params.size(); ++i) {
    for (int j = 0; j < k; ++j) {
      const std::string& name = mine[i * k + j].first;
      auto it = saved_state.find(name);
      NDT_CHECK(
          it != saved_state.end(),
          CheckpointError,
          "checkpoint ",
          dir,
          ": optimizer state is missing '",
          name,
          "'");
      check_tensor_values(*it->second, name, dir);
      NDT_CHECK(
          it->second->shape() == params[i]->layout.global_shape,
          CheckpointError,
          "checkpoint ",
          dir,
          ": optimizer state '",
          name,
          "' has shape ",
          shape_str(it->second->shape()),
          ", expected ",
          shape_str(params[i]->layout.global_shape));
      state.emplace_back(name, params[i]->layout.take_local(*it->second));
    }
  }
  engine.optimizer().load_state(state, step);
  return step;
}

}  // namespace ndt
