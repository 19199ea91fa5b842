// Config loading: YAML text -> YAML node tree -> one schema walker -> Config.
//
// load_config (file + overrides) and config_from_json both build a node tree
// and hand it to config_from_node(), so every key goes through the same
// checks. The schema is the table kKeys: the key's dotted name, the Config
// field it fills (the field's C++ type picks the parser) and its range.
#include "io/config.h"

#include <sched.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <variant>

#include "base/check.h"
#include "io/untrusted.h"

namespace ndt {

int model_blocks(const ModelConfig& m) {
  switch (m.kind) {
    case ModelKind::kMlp:
      return static_cast<int>(m.hidden.size()) * (m.dropout > 0 ? 2 : 1);
    case ModelKind::kVit:
    case ModelKind::kGpt:
      return m.depth;
  }
  NDT_ASSERT(false, "invalid ModelKind ", static_cast<int>(m.kind));
  return 0;
}

int64_t micro_batch_size(const Config& c) {
  return c.train.batch_size / c.parallel.dp / c.parallel.microbatches;
}

int train_threads(const Config& c) {
  if (c.train.threads > 0)
    return c.train.threads;
  // The cores this process may run on, as OpenMP counts its processors.
  cpu_set_t cores;
  CPU_ZERO(&cores);
  if (sched_getaffinity(0, sizeof cores, &cores) == 0)
    return std::max(1, CPU_COUNT(&cores));
  return std::max(1u, std::thread::hardware_concurrency());
}

int64_t model_tokens(const ModelConfig& m) {
  switch (m.kind) {
    case ModelKind::kMlp:
      return 1;
    case ModelKind::kVit: {
      const int64_t side = m.image_size / m.patch;
      return side * side + (m.pool == HeadPool::kCls ? 1 : 0);
    }
    case ModelKind::kGpt:
      return m.seq_len;
  }
  NDT_ASSERT(false, "invalid ModelKind ", static_cast<int>(m.kind));
  return 0;
}

std::string Config::run_dir() const {
  return run.dir.empty() ? "runs/" + run.name : run.dir;
}

namespace {

using detail::str_cat;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Allowed values of a number (or of each entry of a list of numbers).
struct Range {
  double lo = -kInf;
  double hi = kInf;
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
};

constexpr Range at_least(double lo) {
  return {lo, kInf, false, false};
}
constexpr Range above(double lo) {
  return {lo, kInf, true, false};
}
constexpr Range in_half_open(double lo, double hi) {
  return {lo, hi, false, true};
}
constexpr Range in_closed(double lo, double hi) {
  return {lo, hi, false, false};
}

std::string number_text(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// ">= 1", "> 0", "in [0, 1)".
std::string describe(const Range& r) {
  if (r.hi == kInf) {
    return str_cat(r.lo_open ? "> " : ">= ", number_text(r.lo));
  }
  return str_cat(
      "in ",
      r.lo_open ? "(" : "[",
      number_text(r.lo),
      ", ",
      number_text(r.hi),
      r.hi_open ? ")" : "]");
}

// Pointer to the Config field a key fills. Its type picks the parser.
using Field = std::variant<
    int*,
    int64_t*,
    uint64_t*,
    float*,
    bool*,
    std::string*,
    std::vector<int>*,
    ModelKind*,
    Act*,
    HeadPool*,
    DatasetKind*,
    OptimKind*,
    LrDecay*,
    LrScaling*,
    DpMode*,
    PipeSchedule*,
    Recompute*,
    TpMode*,
    SpAttention*,
    LarsModeKind*>;

template <typename T>
struct MemberOf;
template <typename Section, typename T>
struct MemberOf<T Section::*> {
  using type = Section;
};

// field<&OptimConfig::lr>(config) -> &config.optim.lr
template <auto kMember>
Field field(Config& c) {
  using Section = typename MemberOf<decltype(kMember)>::type;
  auto sections = std::tie(
      c.run, c.model, c.data, c.train, c.optim, c.parallel, c.comm, c.verify);
  return &(std::get<Section&>(sections).*kMember);
}

struct Key {
  std::string_view name;    // "section.leaf", as written in YAML
  Field (*field)(Config&);  // where the value goes
  Range range = {};         // numbers and list entries; unbounded if absent
  bool dir_name = false;    // strings: [A-Za-z0-9_.-]+, names a directory
};

// The schema (config.h documents each key). Section order here is the
// order of config_to_json's sections and of error messages.
constexpr Key kKeys[] = {
    {"run.name", field<&RunConfig::name>, {}, true},
    {"run.dir", field<&RunConfig::dir>},

    {"model.kind", field<&ModelConfig::kind>},
    {"model.hidden", field<&ModelConfig::hidden>, at_least(1)},
    {"model.activation", field<&ModelConfig::activation>},
    {"model.dim", field<&ModelConfig::dim>, at_least(1)},
    {"model.depth", field<&ModelConfig::depth>, at_least(1)},
    {"model.heads", field<&ModelConfig::heads>, at_least(1)},
    {"model.mlp_dim", field<&ModelConfig::mlp_dim>, at_least(1)},
    {"model.patch", field<&ModelConfig::patch>, at_least(1)},
    {"model.pool", field<&ModelConfig::pool>},
    {"model.image_size", field<&ModelConfig::image_size>, at_least(1)},
    {"model.channels", field<&ModelConfig::channels>, at_least(1)},
    {"model.num_classes", field<&ModelConfig::num_classes>, at_least(2)},
    {"model.seq_len", field<&ModelConfig::seq_len>, at_least(2)},
    {"model.vocab", field<&ModelConfig::vocab>, at_least(2)},
    {"model.dropout", field<&ModelConfig::dropout>, in_half_open(0, 1)},
    {"model.init_std", field<&ModelConfig::init_std>, above(0)},

    {"data.name", field<&DataConfig::name>},
    {"data.path", field<&DataConfig::path>},
    {"data.cache", field<&DataConfig::cache>},
    {"data.cache_dir", field<&DataConfig::cache_dir>},
    {"data.augment", field<&DataConfig::augment>},
    {"data.shift", field<&DataConfig::shift>, in_closed(0, 8)},

    {"train.steps", field<&TrainConfig::steps>, at_least(1)},
    {"train.batch_size", field<&TrainConfig::batch_size>, at_least(1)},
    {"train.seed", field<&TrainConfig::seed>, at_least(0)},
    {"train.resume", field<&TrainConfig::resume>},
    {"train.overwrite", field<&TrainConfig::overwrite>},
    {"train.log_every", field<&TrainConfig::log_every>, at_least(1)},
    {"train.eval_every", field<&TrainConfig::eval_every>, at_least(0)},
    {"train.eval_samples", field<&TrainConfig::eval_samples>, at_least(0)},
    {"train.checkpoint_every",
     field<&TrainConfig::checkpoint_every>,
     at_least(0)},
    {"train.threads", field<&TrainConfig::threads>, at_least(0)},
    {"train.trace", field<&TrainConfig::trace>},
    {"train.mem_cap_mb", field<&TrainConfig::mem_cap_mb>, at_least(0)},

    {"optim.name", field<&OptimConfig::name>},
    {"optim.lr", field<&OptimConfig::lr>, above(0)},
    {"optim.weight_decay", field<&OptimConfig::weight_decay>, at_least(0)},
    {"optim.momentum", field<&OptimConfig::momentum>, in_half_open(0, 1)},
    {"optim.nesterov", field<&OptimConfig::nesterov>},
    {"optim.beta1", field<&OptimConfig::beta1>, in_half_open(0, 1)},
    {"optim.beta2", field<&OptimConfig::beta2>, in_half_open(0, 1)},
    {"optim.eps", field<&OptimConfig::eps>, above(0)},
    {"optim.clip_grad_norm", field<&OptimConfig::clip_grad_norm>, at_least(0)},
    {"optim.schedule", field<&OptimConfig::schedule>},
    {"optim.warmup_steps", field<&OptimConfig::warmup_steps>, at_least(0)},
    {"optim.warmup_epochs", field<&OptimConfig::warmup_epochs>, at_least(0)},
    {"optim.scale_lr", field<&OptimConfig::scale_lr>},
    {"optim.base_batch", field<&OptimConfig::base_batch>, at_least(0)},
    {"optim.min_lr_ratio", field<&OptimConfig::min_lr_ratio>, in_closed(0, 1)},
    {"optim.power", field<&OptimConfig::power>, above(0)},
    {"optim.lars_mode", field<&OptimConfig::lars_mode>},
    {"optim.trust_coef", field<&OptimConfig::trust_coef>, above(0)},
    {"optim.trust_clip", field<&OptimConfig::trust_clip>, at_least(0)},
    {"optim.lamb_bias_correction", field<&OptimConfig::lamb_bias_correction>},
    {"optim.exclude_no_decay", field<&OptimConfig::exclude_no_decay>},

    {"parallel.dp", field<&ParallelConfig::dp>, at_least(1)},
    {"parallel.dp_mode", field<&ParallelConfig::dp_mode>},
    {"parallel.bucket_mb", field<&ParallelConfig::bucket_mb>, above(0)},
    {"parallel.zero", field<&ParallelConfig::zero>, in_closed(0, 3)},
    {"parallel.defer_broadcast", field<&ParallelConfig::defer_broadcast>},
    {"parallel.pp", field<&ParallelConfig::pp>, at_least(1)},
    {"parallel.pp_chunks", field<&ParallelConfig::pp_chunks>, at_least(1)},
    {"parallel.pp_split", field<&ParallelConfig::pp_split>, at_least(1)},
    {"parallel.schedule", field<&ParallelConfig::schedule>},
    {"parallel.microbatches",
     field<&ParallelConfig::microbatches>,
     at_least(1)},
    {"parallel.recompute", field<&ParallelConfig::recompute>},
    {"parallel.tp", field<&ParallelConfig::tp>, at_least(1)},
    {"parallel.tp_mode", field<&ParallelConfig::tp_mode>},
    {"parallel.tp_depth", field<&ParallelConfig::tp_depth>, at_least(1)},
    {"parallel.tp_seq", field<&ParallelConfig::tp_seq>},
    {"parallel.order", field<&ParallelConfig::order>},
    {"parallel.sp", field<&ParallelConfig::sp>, at_least(1)},
    {"parallel.sp_attention", field<&ParallelConfig::sp_attention>},

    {"comm.timeout_s", field<&CommConfig::timeout_s>, above(0)},

    {"verify.steps", field<&VerifyConfig::steps>, at_least(1)},
};

std::string_view section_of(std::string_view name) {
  return name.substr(0, name.find('.'));
}

std::string_view leaf_of(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

const Key* find_key(std::string_view name) {
  for (const Key& key : kKeys) {
    if (key.name == name)
      return &key;
  }
  return nullptr;
}

// Section names in table order, without repeats.
std::vector<std::string_view> sections() {
  std::vector<std::string_view> out;
  for (const Key& key : kKeys) {
    if (std::find(out.begin(), out.end(), section_of(key.name)) == out.end()) {
      out.push_back(section_of(key.name));
    }
  }
  return out;
}

bool is_section(std::string_view name) {
  auto all = sections();
  return std::find(all.begin(), all.end(), name) != all.end();
}

std::string join(const std::vector<std::string_view>& parts) {
  std::string out;
  for (std::string_view p : parts) {
    if (!out.empty())
      out += ", ";
    out += p;
  }
  return out;
}

// Edit distance counting insertions, deletions, substitutions and swaps of
// neighbours ("setps" -> "steps" is 1).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(
      a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// "unknown config key 'optim.lrr'; did you mean 'optim.lr'?" A known name
// within edit distance 2, or the same leaf in another section
// (train.lr -> optim.lr), is suggested; otherwise the keys of the section,
// or the sections, are listed. `name` is "section.leaf" or a top-level name.
std::string unknown_key_message(std::string_view name) {
  if (name == "parallel.grad_accum") {
    return "config key 'parallel.grad_accum' was replaced by "
           "'parallel.microbatches': the micro-batches each replica splits "
           "its batch into per step (gradient accumulation, with or without "
           "a pipeline)";
  }
  bool dotted = name.find('.') != std::string_view::npos;
  if (!dotted && is_section(name)) {
    // Only an override can name a bare section ("train=5").
    return str_cat(
        "'", name, "' is a config section, not a key: give ", name, ".<key>");
  }
  std::vector<std::string_view> candidates;
  if (!dotted)
    candidates = sections();
  for (const Key& key : kKeys)
    candidates.push_back(key.name);

  std::string_view best;
  size_t best_distance = 3;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(name, c);
    if (c.find('.') != std::string_view::npos && leaf_of(c) == leaf_of(name)) {
      d = std::min<size_t>(d, 1);
    }
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }

  std::string out = str_cat(
      "unknown config ",
      dotted ? "key" : "section",
      " '",
      printable(name),
      "'");
  if (!best.empty())
    return str_cat(out, "; did you mean '", best, "'?");
  std::string_view section = section_of(name);
  if (dotted && is_section(section)) {
    std::vector<std::string_view> leaves;
    for (const Key& key : kKeys) {
      if (section_of(key.name) == section)
        leaves.push_back(leaf_of(key.name));
    }
    return str_cat(out, "; keys in section '", section, "' are ", join(leaves));
  }
  return str_cat(out, "; sections are ", join(sections()));
}

// Quoted or !!str-tagged scalars are text even when they look like numbers.
bool is_plain_scalar(const YAML::Node& node) {
  return node.IsScalar() && node.Tag() != "!" &&
         node.Tag() != "tag:yaml.org,2002:str";
}

// The text of a plain scalar; empty for anything else.
std::string_view plain_text(const YAML::Node& node) {
  return is_plain_scalar(node) ? std::string_view(node.Scalar())
                               : std::string_view();
}

// The value as it appears in a message: 'abc', '"100"', '[1, x]', null.
// Whether `node` nests more than `levels` sequences/maps deep.
bool deeper_than(const YAML::Node& node, int levels) {
  if (!node.IsSequence() && !node.IsMap())
    return false;
  if (levels == 0)
    return true;
  for (const auto& item : node) {
    if (node.IsMap() ? deeper_than(item.first, levels - 1) ||
                           deeper_than(item.second, levels - 1)
                     : deeper_than(item, levels - 1)) {
      return true;
    }
  }
  return false;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull())
    return "null";
  if (node.IsScalar()) {
    return is_plain_scalar(node)
               ? str_cat("'", printable(node.Scalar(), 120), "'")
               : str_cat("'\"", printable(node.Scalar(), 120), "\"'");
  }
  if (deeper_than(node, 8))
    return node.IsMap() ? "a deeply nested map" : "a deeply nested list";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return str_cat("'", printable(out.c_str(), 120), "'");
}

std::string type_message(
    const Key& key, std::string_view want, const YAML::Node& node) {
  return str_cat(
      "config key '", key.name, "' must be ", want, ", got ", describe(node));
}

std::string range_message(const Key& key, std::string_view got, bool entry) {
  return str_cat(
      "config key '",
      key.name,
      entry ? "' entries" : "'",
      " must be ",
      describe(key.range),
      ", got ",
      got);
}

// Base-10 integers ([-+]?[0-9]+). `entry`: the node is one entry of a list.
template <typename T>
requires std::is_integral_v<T>
void read_integer(const Key& key, const YAML::Node& node, T& out, bool entry) {
  std::string_view s = plain_text(node);
  bool negative = s.starts_with('-');
  std::string_view digits = s.substr(s.starts_with('+') ? 1 : 0);
  std::string_view magnitude = digits.substr(negative ? 1 : 0);
  bool syntax = !magnitude.empty() &&
                std::all_of(magnitude.begin(), magnitude.end(), [](char c) {
                  return c >= '0' && c <= '9';
                });
  NDT_CHECK(
      syntax,
      ConfigError,
      entry ? str_cat(
                  "config key '",
                  key.name,
                  "' entries must be integers, got ",
                  describe(node))
            : type_message(key, "an integer", node));

  T v{};
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
    // Below the lowest T: every integer key has a lower bound >= that.
    NDT_CHECK(!negative, ConfigError, range_message(key, s, entry));
    NDT_CHECK(
        false,
        ConfigError,
        "config key '",
        key.name,
        entry ? "' entries" : "'",
        " must be at most ",
        std::numeric_limits<T>::max(),
        ", got ",
        s);
  }
  NDT_CHECK(
      key.range.contains(static_cast<double>(v)),
      ConfigError,
      range_message(key, s, entry));
  out = v;
}

template <typename T>
requires std::is_integral_v<T>
void read(const Key& key, const YAML::Node& node, T& out) {
  read_integer(key, node, out, /*entry=*/false);
}

// Parsed as double and rounded once to float; see json_value(float).
void read(const Key& key, const YAML::Node& node, float& out) {
  std::string_view s = plain_text(node);
  std::string_view text = s.substr(s.starts_with('+') ? 1 : 0);
  double d = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), d);
  bool number = !text.empty() && r.ec != std::errc::invalid_argument &&
                r.ptr == text.data() + text.size();
  NDT_CHECK(number, ConfigError, type_message(key, "a number", node));
  float v = static_cast<float>(d);
  NDT_CHECK(
      r.ec == std::errc() && std::isfinite(v),
      ConfigError,
      type_message(key, "a finite 32-bit float", node));
  NDT_CHECK(key.range.contains(v), ConfigError, range_message(key, s, false));
  out = v;
}

void read(const Key& key, const YAML::Node& node, bool& out) {
  std::string_view s = plain_text(node);
  bool is_true = s == "true" || s == "True" || s == "TRUE";
  bool is_false = s == "false" || s == "False" || s == "FALSE";
  NDT_CHECK(
      is_true || is_false,
      ConfigError,
      type_message(key, "true or false", node));
  out = is_true;
}

bool is_dir_name(std::string_view s) {
  auto ok = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  };
  return !s.empty() && s != "." && s != ".." &&
         std::all_of(s.begin(), s.end(), ok);
}

// Null (`resume:` or an override `train.resume=`) is the empty string.
void read(const Key& key, const YAML::Node& node, std::string& out) {
  NDT_CHECK(
      node.IsNull() || node.IsScalar(),
      ConfigError,
      type_message(key, "a string", node));
  std::string s = node.IsNull() ? "" : node.Scalar();
  NDT_CHECK(
      !key.dir_name || is_dir_name(s),
      ConfigError,
      "config key '",
      key.name,
      "' names a directory: it must match [A-Za-z0-9_.-]+ and not be . or "
      "..; got '",
      printable(s),
      "'");
  out = std::move(s);
}

void read(const Key& key, const YAML::Node& node, std::vector<int>& out) {
  NDT_CHECK(
      node.IsSequence(),
      ConfigError,
      type_message(key, "a list of integers", node));
  std::vector<int> v(node.size());
  for (size_t i = 0; i < v.size(); ++i) {
    read_integer(key, node[i], v[i], /*entry=*/true);
  }
  out = std::move(v);
}

template <typename E>
requires std::is_enum_v<E>
void read(const Key& key, const YAML::Node& node, E& out) {
  std::vector<std::string_view> names;
  for (const EnumName<E>& e : EnumNames<E>::kTable) {
    if (node.IsScalar() && node.Scalar() == e.name) {
      out = e.value;
      return;
    }
    names.push_back(e.name);
  }
  NDT_CHECK(
      false,
      ConfigError,
      "config key '",
      key.name,
      "' must be one of ",
      join(names),
      ", got ",
      node.IsScalar() ? str_cat("'", node.Scalar(), "'") : describe(node));
}

// Map keys must be plain names.
std::string key_text(const YAML::Node& node, std::string_view where) {
  NDT_CHECK(
      node.IsScalar(),
      ConfigError,
      "config keys must be names; got ",
      describe(node),
      " in ",
      where);
  return node.Scalar();
}

// A section is a map of keys; an empty (null) section is allowed.
void check_section(std::string_view section, const YAML::Node& node) {
  NDT_CHECK(
      !node.IsDefined() || node.IsNull() || node.IsMap(),
      ConfigError,
      "config section '",
      section,
      "' must be a map of key: value entries, got ",
      describe(node));
}

void check_root(const YAML::Node& root, std::string_view where) {
  NDT_CHECK(
      root.IsNull() || root.IsMap(),
      ConfigError,
      where,
      " must be a map of sections (",
      join(sections()),
      "), got ",
      describe(root));
}

// Tensor-parallel keys: every split the layers make must be exact, checked
// before anything is allocated.
void check_tensor_parallel(const Config& c) {
  const ParallelConfig& p = c.parallel;
  {
    std::vector<std::string> axes;
    std::string_view rest = p.order;
    while (true) {
      size_t comma = rest.find(',');
      axes.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos)
        break;
      rest = rest.substr(comma + 1);
    }
    std::vector<std::string> sorted = axes;
    std::sort(sorted.begin(), sorted.end());
    const std::vector<std::string> want = {"dp", "pp", "tp"};
    NDT_CHECK(
        sorted == want,
        ConfigError,
        "parallel.order must list the mesh axes dp, pp and tp once each, "
        "outermost first (e.g. dp,pp,tp), got '",
        p.order,
        "'");
  }
  NDT_CHECK(
      p.tp > 1 || !p.tp_seq,
      ConfigError,
      "parallel.tp_seq needs tensor parallelism (parallel.tp > 1)");
  NDT_CHECK(
      p.tp_depth == 1 || (p.tp > 1 && p.tp_mode == TpMode::k2p5d),
      ConfigError,
      "parallel.tp_depth=",
      p.tp_depth,
      " is the depth of parallel.tp_mode=2.5d (parallel.tp = q^2 x "
      "tp_depth); with parallel.tp_mode=",
      to_string(p.tp_mode),
      " and parallel.tp=",
      p.tp,
      " leave it at 1");
  // The checks of the configured mode itself live with the mode
  // (parallel/tensor_parallel_mode.h) and run before anything is
  // allocated.
}

// Pipeline keys: consistent with each other and with the model's blocks.
void check_pipeline(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.pp == 1) {
    NDT_CHECK(
        p.pp_chunks == 1 && p.pp_split.empty(),
        ConfigError,
        "parallel.pp_chunks and parallel.pp_split need a pipeline "
        "(parallel.pp > 1)");
    return;
  }
  NDT_CHECK(
      p.dp_mode == DpMode::kMpi,
      ConfigError,
      "parallel.pp=",
      p.pp,
      " needs parallel.dp_mode=mpi (one rank per stage)");
  NDT_CHECK(
      p.pp_chunks == 1 || p.schedule == PipeSchedule::kInterleaved,
      ConfigError,
      "parallel.pp_chunks=",
      p.pp_chunks,
      " needs parallel.schedule=interleaved, got ",
      to_string(p.schedule));
  const int stages = p.pp * p.pp_chunks;
  const int blocks = model_blocks(c.model);
  NDT_CHECK(
      stages <= blocks,
      ConfigError,
      "parallel.pp (",
      p.pp,
      ") x parallel.pp_chunks (",
      p.pp_chunks,
      ") = ",
      stages,
      " stages, but model.kind ",
      to_string(c.model.kind),
      " has only ",
      blocks,
      " blocks to cut; at most ",
      blocks,
      " stages are allowed");
  if (!p.pp_split.empty()) {
    int sum = 0;
    for (int n : p.pp_split)
      sum += n;
    NDT_CHECK(
        static_cast<int>(p.pp_split.size()) == stages && sum == blocks,
        ConfigError,
        "parallel.pp_split has ",
        p.pp_split.size(),
        " entries summing to ",
        sum,
        "; it needs parallel.pp x parallel.pp_chunks = ",
        stages,
        " entries (blocks per stage, each >= 1) summing to the model's ",
        blocks,
        " blocks");
  }
}

// ZeRO shards the optimizer (stage 2: and the gradients; stage 3: and the
// parameters) over the ranks whose gradients the data-parallel sync sums
// (dp, sequence-parallel and 2.5D depth ranks), in every layout of MPI
// ranks.
void check_zero(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.zero == 0)
    return;
  NDT_CHECK(
      p.dp_mode == DpMode::kMpi,
      ConfigError,
      "parallel.zero=",
      p.zero,
      " shards the optimizer state over data-parallel MPI ranks: it needs "
      "parallel.dp_mode=mpi, got ",
      to_string(p.dp_mode));
}

// Rules between keys, checked once every key is read.
void check_cross_keys(const Config& c) {
  const ModelConfig& m = c.model;
  const char* kind = to_string(m.kind);
  const char* data = to_string(c.data.name);
  if (m.kind == ModelKind::kVit || m.kind == ModelKind::kGpt) {
    NDT_CHECK(
        m.dim % m.heads == 0,
        ConfigError,
        "model.dim (",
        m.dim,
        ") must be divisible by model.heads (",
        m.heads,
        ") for model.kind ",
        kind);
  }
  if (m.kind == ModelKind::kVit) {
    NDT_CHECK(
        m.image_size % m.patch == 0,
        ConfigError,
        "model.image_size (",
        m.image_size,
        ") must be divisible by model.patch (",
        m.patch,
        ") for model.kind vit");
  }
  NDT_CHECK(
      c.optim.warmup_steps < c.train.steps,
      ConfigError,
      "optim.warmup_steps (",
      c.optim.warmup_steps,
      ") must be less than train.steps (",
      c.train.steps,
      ")");
  NDT_CHECK(
      c.optim.warmup_steps == 0 || c.optim.warmup_epochs == 0,
      ConfigError,
      "set one of optim.warmup_steps (",
      c.optim.warmup_steps,
      ") and optim.warmup_epochs (",
      c.optim.warmup_epochs,
      "), not both");
  if (c.optim.scale_lr == LrScaling::kNone) {
    NDT_CHECK(
        c.optim.base_batch == 0,
        ConfigError,
        "optim.base_batch (",
        c.optim.base_batch,
        ") is only used with optim.scale_lr linear or sqrt (got none)");
  } else {
    NDT_CHECK(
        c.optim.base_batch >= 1,
        ConfigError,
        "optim.scale_lr ",
        to_string(c.optim.scale_lr),
        " needs optim.base_batch >= 1: the batch size optim.lr was chosen "
        "for");
  }
  NDT_CHECK(
      !c.optim.nesterov || c.optim.momentum > 0,
      ConfigError,
      "optim.nesterov needs optim.momentum > 0, got optim.momentum ",
      c.optim.momentum);

  if (m.kind == ModelKind::kGpt) {
    NDT_CHECK(
        c.data.name == DatasetKind::kFortunes ||
            c.data.name == DatasetKind::kSynthetic,
        ConfigError,
        "model.kind gpt needs data.name fortunes or synthetic, got ",
        data);
  } else {
    NDT_CHECK(
        c.data.name == DatasetKind::kFashionMnist ||
            c.data.name == DatasetKind::kSynthetic,
        ConfigError,
        "model.kind ",
        kind,
        " needs data.name fashion_mnist or synthetic, got ",
        data);
  }
  if (c.data.name == DatasetKind::kFashionMnist) {
    NDT_CHECK(
        m.image_size == 28,
        ConfigError,
        "data.name fashion_mnist has 28x28 images: model.image_size must be "
        "28, got ",
        m.image_size);
    NDT_CHECK(
        m.channels == 1,
        ConfigError,
        "data.name fashion_mnist has grayscale images: model.channels must "
        "be 1, got ",
        m.channels);
    NDT_CHECK(
        m.num_classes == 10,
        ConfigError,
        "data.name fashion_mnist has 10 classes: model.num_classes must be "
        "10, got ",
        m.num_classes);
  }
  const ParallelConfig& p = c.parallel;
  const int64_t parts = int64_t(p.dp) * p.microbatches;
  NDT_CHECK(
      c.train.batch_size % parts == 0,
      ConfigError,
      "train.batch_size (",
      c.train.batch_size,
      ") must be divisible by parallel.dp (",
      p.dp,
      ") x ",
      "parallel.microbatches (",
      p.microbatches,
      ") = ",
      parts);
  check_pipeline(c);
  check_tensor_parallel(c);
  check_zero(c);
  if (m.kind == ModelKind::kGpt && c.data.name == DatasetKind::kFortunes) {
    NDT_CHECK(
        m.vocab == 256,
        ConfigError,
        "data.name fortunes is tokenised as bytes: model.vocab must be 256 "
        "for model.kind gpt, got ",
        m.vocab);
  }
}

// The one validation path: `root` is a map of sections of key: value.
Config config_from_node(const YAML::Node& root, std::string_view where) {
  check_root(root, where);
  Config config;
  std::set<std::string, std::less<>> seen;
  if (root.IsMap()) {
    for (const auto& section_item : root) {
      std::string section = key_text(section_item.first, where);
      const YAML::Node& body = section_item.second;
      NDT_CHECK(is_section(section), ConfigError, unknown_key_message(section));
      check_section(section, body);
      NDT_CHECK(
          seen.insert(section).second,
          ConfigError,
          "config section '",
          section,
          "' appears twice");
      if (!body.IsMap())
        continue;
      for (const auto& item : body) {
        std::string name =
            str_cat(section, ".", key_text(item.first, "section " + section));
        const Key* key = find_key(name);
        NDT_CHECK(key != nullptr, ConfigError, unknown_key_message(name));
        NDT_CHECK(
            seen.insert(name).second,
            ConfigError,
            "config key '",
            name,
            "' appears twice");
        std::visit(
            [&](auto* value) { read(*key, item.second, *value); },
            key->field(config));
      }
    }
  }
  check_cross_keys(config);
  return config;
}

YAML::Node load_yaml_file(const std::string& path) {
  std::error_code ec;
  NDT_CHECK(
      std::filesystem::exists(path, ec),
      ConfigError,
      "config file '",
      path,
      "' not found");
  NDT_CHECK(
      std::filesystem::is_regular_file(path, ec),
      ConfigError,
      "config file '",
      path,
      "' is not a regular file");
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(str_cat(
        "config file '",
        path,
        "': YAML syntax error at line ",
        e.mark.line + 1,
        ", column ",
        e.mark.column + 1,
        ": ",
        e.msg));
  } catch (const YAML::Exception& e) {
    throw ConfigError(str_cat("cannot read config file '", path, "': ", e.msg));
  }
}

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos)
    return {};
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

// "section.leaf=value": the value is parsed as YAML and replaces the file's.
void apply_override(YAML::Node& root, const std::string& text) {
  size_t eq = text.find('=');
  NDT_CHECK(
      eq != std::string::npos,
      ConfigError,
      "override '",
      printable(text),
      "' must be key=value, e.g. optim.lr=0.001");
  std::string_view name = trim(std::string_view(text).substr(0, eq));
  NDT_CHECK(
      !name.empty(),
      ConfigError,
      "override '",
      printable(text),
      "' has an empty key");
  NDT_CHECK(
      find_key(name) != nullptr,
      ConfigError,
      unknown_key_message(name),
      " (override '",
      printable(text),
      "')");
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(str_cat(
        "override '",
        printable(text),
        "': the value is not valid YAML: ",
        e.msg));
  }
  std::string section(section_of(name));
  check_section(section, root[section]);
  if (!root[section].IsMap())
    root[section] = YAML::Node(YAML::NodeType::Map);
  root[section][std::string(leaf_of(name))] = value;
}

// JSON -> YAML node tree for config_from_node. Strings become quoted
// scalars so that {"steps": "100"} is rejected as it would be in YAML.
YAML::Node yaml_from_json(const nlohmann::json& j, int depth = 0) {
  using Type = nlohmann::json::value_t;
  NDT_CHECK(
      depth <= kMaxJsonDepth,
      ConfigError,
      "config JSON nests deeper than ",
      kMaxJsonDepth,
      " levels");
  switch (j.type()) {
    case Type::object: {
      YAML::Node out(YAML::NodeType::Map);
      for (const auto& [k, v] : j.items())
        out[k] = yaml_from_json(v, depth + 1);
      return out;
    }
    case Type::array: {
      YAML::Node out(YAML::NodeType::Sequence);
      for (const auto& v : j)
        out.push_back(yaml_from_json(v, depth + 1));
      return out;
    }
    case Type::string: {
      YAML::Node out(j.get<std::string>());
      out.SetTag("!");
      return out;
    }
    case Type::boolean:
    case Type::number_integer:
    case Type::number_unsigned:
    case Type::number_float:
      return YAML::Node(j.dump());
    case Type::null:
      return YAML::Node();
    case Type::binary:
    case Type::discarded:
      break;
  }
  NDT_CHECK(false, ConfigError, "config JSON holds a non-JSON value");
  return YAML::Node();
}

// Floats are written as the shortest decimal that reads back as the same
// float (0.001, not 0.0010000000474974513) when that decimal, read as a
// double and rounded to float (as read(float&) does), gives it back;
// otherwise as the float's exact double value. Either way the round trip
// through JSON is exact.
nlohmann::json json_value(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  double d = 0;
  std::from_chars(buf, r.ptr, d);
  return static_cast<float>(d) == v ? d : static_cast<double>(v);
}

template <typename E>
requires std::is_enum_v<E> nlohmann::json json_value(const E& v) {
  return to_string(v);
}

template <typename T>
nlohmann::json json_value(const T& v) {
  return v;
}

}  // namespace

Config load_config(
    const std::string& yaml_path, const std::vector<std::string>& overrides) {
  YAML::Node root(YAML::NodeType::Map);
  std::string where = "the config";
  if (!yaml_path.empty()) {
    root.reset(load_yaml_file(yaml_path));
    where = str_cat("config file '", yaml_path, "'");
    check_root(root, where);
    if (root.IsNull())
      root.reset(YAML::Node(YAML::NodeType::Map));
  }
  for (const std::string& text : overrides)
    apply_override(root, text);
  return config_from_node(root, where);
}

nlohmann::json config_to_json(const Config& config) {
  Config copy = config;  // Key::field hands out pointers into a Config
  nlohmann::json out = nlohmann::json::object();
  for (const Key& key : kKeys) {
    out[std::string(section_of(key.name))][std::string(leaf_of(key.name))] =
        std::visit(
            [](auto* value) { return json_value(*value); }, key.field(copy));
  }
  return out;
}

Config config_from_json(const nlohmann::json& json) {
  return config_from_node(yaml_from_json(json), "the config JSON");
}

}  // namespace ndt
