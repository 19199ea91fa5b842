// Config loader: defaults, YAML files, overrides, every error class with its
// message, cross-key rules, the JSON round trip and the shipped configs.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/config.h"
#include "test_util.h"

namespace ndt {
namespace {

// A YAML file in the test temp dir, removed when the test ends.
class TempYaml {
 public:
  explicit TempYaml(const std::string& text) {
    static int counter = 0;
    path_ = ::testing::TempDir() + "ndt_config_" + std::to_string(getpid()) +
            "_" + std::to_string(counter++) + ".yaml";
    std::ofstream(path_) << text;
  }
  ~TempYaml() {
    std::filesystem::remove(path_);
  }
  const std::string& path() const {
    return path_;
  }

 private:
  std::string path_;
};

Config load_text(
    const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  TempYaml file(yaml);
  return load_config(file.path(), overrides);
}

// The ConfigError message `f` throws; fails the test if it throws nothing.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

std::string yaml_error(const std::string& yaml) {
  return error_of([&] { load_text(yaml); });
}

std::string override_error(const std::vector<std::string>& overrides) {
  return error_of([&] { load_config("", overrides); });
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) {
    EXPECT_NE(msg.find(p), std::string::npos)
        << "message: " << msg << "\nmissing: " << p;
  }
}

TEST(Config, Defaults) {
  Config c = load_config("", {});
  EXPECT_EQ(config_to_json(c), config_to_json(Config{}));
  EXPECT_EQ(c.model.kind, ModelKind::kMlp);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{1024, 1024}));
  EXPECT_EQ(c.data.name, DatasetKind::kFashionMnist);
  EXPECT_EQ(c.optim.name, OptimKind::kAdamw);
  EXPECT_EQ(c.optim.lr, 1e-3f);
  EXPECT_EQ(c.train.steps, 1000);
  EXPECT_EQ(c.train.seed, 1u);
  EXPECT_EQ(c.run_dir(), "runs/run");
}

// train.threads, or (0) the cores OpenMP counts for this process.
TEST(Config, TrainThreads) {
  Config c;
  c.train.threads = 3;
  EXPECT_EQ(train_threads(c), 3);
  c.train.threads = 0;
  EXPECT_EQ(train_threads(c), omp_get_num_procs());
}

TEST(Config, RunDir) {
  Config c = load_config("", {"run.name=exp1"});
  EXPECT_EQ(c.run_dir(), "runs/exp1");
  c = load_config("", {"run.name=exp1", "run.dir=/tmp/out"});
  EXPECT_EQ(c.run_dir(), "/tmp/out");
}

TEST(Config, ToString) {
  EXPECT_STREQ(to_string(ModelKind::kVit), "vit");
  EXPECT_STREQ(to_string(Act::kRelu), "relu");
  EXPECT_STREQ(to_string(HeadPool::kMean), "mean");
  EXPECT_STREQ(to_string(DatasetKind::kFashionMnist), "fashion_mnist");
  EXPECT_STREQ(to_string(OptimKind::kSgd), "sgd");
  EXPECT_STREQ(to_string(LrDecay::kPolynomial), "polynomial");
}

TEST(Config, LoadsYamlFile) {
  Config c = load_text(R"(
# a comment
run:
  name: vit-small
model:
  kind: vit
  dim: 96
  heads: 3
  patch: 4
  pool: mean
  dropout: 0.25
data:
  name: fashion_mnist
  augment: true
  shift: 3
train:
  steps: 200
  seed: 7
  resume: latest
optim:
  name: sgd
  lr: 0.05
  momentum: 0.8
  nesterov: true
  schedule: linear
  warmup_steps: 10
)");
  EXPECT_EQ(c.run.name, "vit-small");
  EXPECT_EQ(c.model.kind, ModelKind::kVit);
  EXPECT_EQ(c.model.dim, 96);
  EXPECT_EQ(c.model.heads, 3);
  EXPECT_EQ(c.model.patch, 4);
  EXPECT_EQ(c.model.pool, HeadPool::kMean);
  EXPECT_EQ(c.model.dropout, 0.25f);
  EXPECT_TRUE(c.data.augment);
  EXPECT_EQ(c.data.shift, 3);
  EXPECT_EQ(c.train.steps, 200);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.train.resume, "latest");
  EXPECT_EQ(c.optim.name, OptimKind::kSgd);
  EXPECT_EQ(c.optim.lr, 0.05f);
  EXPECT_EQ(c.optim.momentum, 0.8f);
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_EQ(c.optim.schedule, LrDecay::kLinear);
  EXPECT_EQ(c.optim.warmup_steps, 10);
  // Untouched keys keep their defaults.
  EXPECT_EQ(c.model.depth, 4);
  EXPECT_EQ(c.train.batch_size, 128);
}

TEST(Config, EmptyFileAndEmptySectionGiveDefaults) {
  EXPECT_EQ(config_to_json(load_text("")), config_to_json(Config{}));
  EXPECT_EQ(
      config_to_json(load_text("train:\noptim:\n")), config_to_json(Config{}));
}

// Every key set to a non-default value by an override, read back from the
// struct: checks the schema table wires each key to its own field.
TEST(Config, OverridesEachKeyAndType) {
  Config c = load_config(
      "",
      {
          "run.name=r1",
          "run.dir=out/r1",
          "model.kind=vit",
          "model.hidden=[512, 256]",
          "model.activation=relu",
          "model.dim=96",
          "model.depth=2",
          "model.heads=6",
          "model.mlp_dim=384",
          "model.patch=14",
          "model.pool=mean",
          "model.image_size=28",
          "model.channels=1",
          "model.num_classes=10",
          "model.seq_len=64",
          "model.vocab=300",
          "model.dropout=0.5",
          "model.init_std=0.01",
          "data.name=fashion_mnist",
          "data.path=/data/fm",
          "data.cache=false",
          "data.cache_dir=/scratch/cache",
          "data.augment=true",
          "data.shift=4",
          "train.steps=200",
          "train.batch_size=64",
          "train.seed=18446744073709551615",
          "train.resume=runs/x/checkpoints/step-100",
          "train.log_every=5",
          "train.eval_every=20",
          "train.eval_samples=1000",
          "train.checkpoint_every=50",
          "train.threads=3",
          "optim.name=sgd",
          "optim.lr=1e-3",
          "optim.weight_decay=0.1",
          "optim.momentum=0.5",
          "optim.nesterov=true",
          "optim.beta1=0.8",
          "optim.beta2=0.99",
          "optim.eps=1e-6",
          "optim.clip_grad_norm=2",
          "optim.schedule=polynomial",
          "optim.warmup_steps=199",
          "optim.min_lr_ratio=1",
          "optim.power=0.5",
      });
  EXPECT_EQ(c.run.name, "r1");
  EXPECT_EQ(c.run.dir, "out/r1");
  EXPECT_EQ(c.model.kind, ModelKind::kVit);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{512, 256}));
  EXPECT_EQ(c.model.activation, Act::kRelu);
  EXPECT_EQ(c.model.dim, 96);
  EXPECT_EQ(c.model.depth, 2);
  EXPECT_EQ(c.model.heads, 6);
  EXPECT_EQ(c.model.mlp_dim, 384);
  EXPECT_EQ(c.model.patch, 14);
  EXPECT_EQ(c.model.pool, HeadPool::kMean);
  EXPECT_EQ(c.model.image_size, 28);
  EXPECT_EQ(c.model.channels, 1);
  EXPECT_EQ(c.model.num_classes, 10);
  EXPECT_EQ(c.model.seq_len, 64);
  EXPECT_EQ(c.model.vocab, 300);
  EXPECT_EQ(c.model.dropout, 0.5f);
  EXPECT_EQ(c.model.init_std, 0.01f);
  EXPECT_EQ(c.data.name, DatasetKind::kFashionMnist);
  EXPECT_EQ(c.data.path, "/data/fm");
  EXPECT_FALSE(c.data.cache);
  EXPECT_EQ(c.data.cache_dir, "/scratch/cache");
  EXPECT_TRUE(c.data.augment);
  EXPECT_EQ(c.data.shift, 4);
  EXPECT_EQ(c.train.steps, 200);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_EQ(c.train.seed, 18446744073709551615u);
  EXPECT_EQ(c.train.resume, "runs/x/checkpoints/step-100");
  EXPECT_EQ(c.train.log_every, 5);
  EXPECT_EQ(c.train.eval_every, 20);
  EXPECT_EQ(c.train.eval_samples, 1000);
  EXPECT_EQ(c.train.checkpoint_every, 50);
  EXPECT_EQ(c.train.threads, 3);
  EXPECT_EQ(c.optim.name, OptimKind::kSgd);
  EXPECT_EQ(c.optim.lr, 1e-3f);
  EXPECT_EQ(c.optim.weight_decay, 0.1f);
  EXPECT_EQ(c.optim.momentum, 0.5f);
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_EQ(c.optim.beta1, 0.8f);
  EXPECT_EQ(c.optim.beta2, 0.99f);
  EXPECT_EQ(c.optim.eps, 1e-6f);
  EXPECT_EQ(c.optim.clip_grad_norm, 2.0f);
  EXPECT_EQ(c.optim.schedule, LrDecay::kPolynomial);
  EXPECT_EQ(c.optim.warmup_steps, 199);
  EXPECT_EQ(c.optim.min_lr_ratio, 1.0f);
  EXPECT_EQ(c.optim.power, 0.5f);
}

TEST(Config, OverrideBeatsFile) {
  Config c = load_text(
      "train:\n  steps: 100\noptim:\n  lr: 0.1\n",
      {"train.steps=300", "optim.lr=0.002", "model.hidden=[64]"});
  EXPECT_EQ(c.train.steps, 300);
  EXPECT_EQ(c.optim.lr, 0.002f);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{64}));
  // The last of two overrides of one key wins.
  c = load_config("", {"train.steps=5", "train.steps=6"});
  EXPECT_EQ(c.train.steps, 6);
}

TEST(Config, OverrideClearsString) {
  Config c = load_text("train:\n  resume: latest\n", {"train.resume="});
  EXPECT_EQ(c.train.resume, "");
}

TEST(Config, OverrideSyntaxErrors) {
  expect_has(
      override_error({"optim.lr"}),
      {"override 'optim.lr'", "must be key=value"});
  expect_has(override_error({"=5"}), {"override '=5'", "empty key"});
  expect_has(
      override_error({"model.hidden=[1, 2"}),
      {"override 'model.hidden=[1, 2'", "not valid YAML"});
  expect_has(
      override_error({"train=5"}),
      {"'train' is a config section, not a key", "override 'train=5'"});
  expect_has(
      override_error({"optim.lrr=0.1"}),
      {"unknown config key 'optim.lrr'",
       "did you mean 'optim.lr'?",
       "override 'optim.lrr=0.1'"});
}

TEST(Config, UnknownKeySuggestsClosest) {
  expect_has(
      yaml_error("optim:\n  lrr: 0.1\n"),
      {"unknown config key 'optim.lrr'", "did you mean 'optim.lr'?"});
  expect_has(
      yaml_error("train:\n  setps: 10\n"),
      {"unknown config key 'train.setps'", "did you mean 'train.steps'?"});
  // Same key name in another section.
  expect_has(
      yaml_error("train:\n  lr: 0.1\n"),
      {"unknown config key 'train.lr'", "did you mean 'optim.lr'?"});
  // Nothing close: the section's keys are listed.
  expect_has(
      yaml_error("optim:\n  frobnicate: 1\n"),
      {"unknown config key 'optim.frobnicate'",
       "keys in section 'optim' are name, lr, weight_decay"});
  expect_has(
      yaml_error("trian:\n  steps: 10\n"),
      {"unknown config section 'trian'", "did you mean 'train'?"});
  expect_has(
      yaml_error("lr: 0.1\n"),
      {"unknown config section 'lr'", "did you mean 'optim.lr'?"});
  expect_has(
      yaml_error("zzzzzz: 1\n"),
      {"unknown config section 'zzzzzz'",
       "sections are run, model, data, train, optim"});
}

TEST(Config, WrongType) {
  expect_has(
      override_error({"train.steps=abc"}),
      {"config key 'train.steps' must be an integer, got 'abc'"});
  expect_has(
      override_error({"train.steps=1.5"}),
      {"config key 'train.steps' must be an integer, got '1.5'"});
  expect_has(
      yaml_error("train:\n  steps: \"100\"\n"),
      {"config key 'train.steps' must be an integer, got '\"100\"'"});
  expect_has(
      override_error({"optim.lr=fast"}),
      {"config key 'optim.lr' must be a number, got 'fast'"});
  expect_has(
      override_error({"optim.lr=.inf"}),
      {"config key 'optim.lr' must be a number, got '.inf'"});
  expect_has(
      override_error({"optim.lr=1e39"}),
      {"config key 'optim.lr' must be a finite 32-bit float, got '1e39'"});
  expect_has(
      override_error({"data.augment=1"}),
      {"config key 'data.augment' must be true or false, got '1'"});
  expect_has(
      override_error({"model.hidden=512"}),
      {"config key 'model.hidden' must be a list of integers, got '512'"});
  expect_has(
      override_error({"model.hidden=[512, x]"}),
      {"config key 'model.hidden' entries must be integers, got 'x'"});
  expect_has(
      override_error({"train.resume=[1, 2]"}),
      {"config key 'train.resume' must be a string, got '[1, 2]'"});
  expect_has(
      override_error({"train.steps="}),
      {"config key 'train.steps' must be an integer, got null"});
  expect_has(
      yaml_error("optim:\n  lr: {a: 1}\n"),
      {"config key 'optim.lr' must be a number, got '{a: 1}'"});
}

TEST(Config, OutOfRange) {
  expect_has(
      override_error({"model.dropout=1.5"}),
      {"config key 'model.dropout' must be in [0, 1), got 1.5"});
  expect_has(
      override_error({"model.dropout=1"}),
      {"config key 'model.dropout' must be in [0, 1), got 1"});
  expect_has(
      override_error({"train.steps=0"}),
      {"config key 'train.steps' must be >= 1, got 0"});
  expect_has(
      override_error({"optim.lr=0"}),
      {"config key 'optim.lr' must be > 0, got 0"});
  expect_has(
      override_error({"data.shift=9"}),
      {"config key 'data.shift' must be in [0, 8], got 9"});
  expect_has(
      override_error({"model.num_classes=1"}),
      {"config key 'model.num_classes' must be >= 2, got 1"});
  expect_has(
      override_error({"optim.min_lr_ratio=-0.5"}),
      {"config key 'optim.min_lr_ratio' must be in [0, 1], got -0.5"});
  expect_has(
      override_error({"model.hidden=[64, 0]"}),
      {"config key 'model.hidden' entries must be >= 1, got 0"});
  expect_has(
      override_error({"train.seed=-1"}),
      {"config key 'train.seed' must be >= 0, got -1"});
  expect_has(
      override_error({"train.threads=-99999999999"}),
      {"config key 'train.threads' must be >= 0, got -99999999999"});
  expect_has(
      override_error({"model.dim=99999999999"}),
      {"config key 'model.dim' must be at most 2147483647, got 99999999999"});
  expect_has(
      override_error({"train.seed=18446744073709551616"}),
      {"config key 'train.seed' must be at most 18446744073709551615"});
}

TEST(Config, BadEnumListsAllowedValues) {
  expect_has(
      override_error({"optim.name=adam"}),
      {"config key 'optim.name' must be one of sgd, adamw, lars, lamb, "
       "got 'adam'"});
  expect_has(
      yaml_error("optim:\n  schedule: step\n"),
      {"config key 'optim.schedule' must be one of constant, cosine, linear, "
       "polynomial, got 'step'"});
  expect_has(
      override_error({"data.name=mnist"}),
      {"must be one of fashion_mnist, fortunes, synthetic, got 'mnist'"});
}

TEST(Config, RunNameMustNameADirectory) {
  expect_has(
      override_error({"run.name=a/b"}),
      {"config key 'run.name'", "[A-Za-z0-9_.-]+", "got 'a/b'"});
  expect_has(override_error({"run.name=.."}), {"config key 'run.name'"});
  expect_has(override_error({"run.name="}), {"config key 'run.name'"});
}

TEST(Config, YamlSyntaxErrorNamesPathAndLine) {
  TempYaml file("train:\n  steps: 10\n  batch_size: [1, 2\noptim:\n");
  std::string msg = error_of([&] { load_config(file.path(), {}); });
  expect_has(msg, {"config file '" + file.path() + "'", "YAML syntax error"});
  // The parser reports the line where it notices the unclosed list.
  EXPECT_TRUE(
      msg.find("at line 3") != std::string::npos ||
      msg.find("at line 4") != std::string::npos)
      << msg;

  TempYaml tab("train:\n  steps: 10\n\t bad: indent\n");
  expect_has(
      error_of([&] { load_config(tab.path(), {}); }),
      {"config file '" + tab.path() + "'", "line 3"});
}

TEST(Config, MissingFileNamesPath) {
  std::string path = ::testing::TempDir() + "ndt_no_such_config.yaml";
  expect_has(
      error_of([&] { load_config(path, {}); }),
      {"config file '" + path + "' not found"});
  expect_has(
      error_of([&] { load_config(::testing::TempDir(), {}); }),
      {"is not a regular file"});
}

TEST(Config, SectionMustBeAMap) {
  expect_has(
      yaml_error("train: 5\n"),
      {"config section 'train' must be a map", "got '5'"});
  expect_has(
      yaml_error("optim: [1, 2]\n"),
      {"config section 'optim' must be a map", "got '[1, 2]'"});
  // An override into a section the file made a scalar.
  expect_has(
      error_of([] { load_text("train: 5\n", {"train.steps=3"}); }),
      {"config section 'train' must be a map"});
  expect_has(yaml_error("- a\n- b\n"), {"must be a map of sections"});
}

TEST(Config, DuplicateKeysAreErrors) {
  expect_has(
      yaml_error("train:\n  steps: 1\n  steps: 2\n"),
      {"config key 'train.steps' appears twice"});
  expect_has(
      yaml_error("train:\n  steps: 1\ntrain:\n  seed: 2\n"),
      {"config section 'train' appears twice"});
}

TEST(Config, CrossKeyRules) {
  expect_has(
      override_error({"model.kind=vit", "model.dim=100", "model.heads=3"}),
      {"model.dim (100) must be divisible by model.heads (3)"});
  // dim/heads only matter for the transformers.
  EXPECT_NO_THROW(load_config("", {"model.dim=100", "model.heads=3"}));
  expect_has(
      override_error({"model.kind=vit", "model.patch=5"}),
      {"model.image_size (28) must be divisible by model.patch (5)"});
  expect_has(
      override_error({"train.steps=100", "optim.warmup_steps=100"}),
      {"optim.warmup_steps (100) must be less than train.steps (100)"});
  expect_has(
      override_error({"optim.warmup_steps=10", "optim.warmup_epochs=1"}),
      {"set one of optim.warmup_steps (10) and optim.warmup_epochs (1), "
       "not both"});
  expect_has(
      override_error({"optim.scale_lr=linear"}),
      {"optim.scale_lr linear needs optim.base_batch >= 1"});
  expect_has(
      override_error({"optim.base_batch=128"}),
      {"optim.base_batch (128) is only used with optim.scale_lr linear or "
       "sqrt (got none)"});
  expect_has(
      override_error({"optim.scale_lr=cubic", "optim.base_batch=128"}),
      {"optim.scale_lr", "none, linear, sqrt"});
  expect_has(
      override_error({"optim.warmup_epochs=-1"}), {"optim.warmup_epochs"});
  expect_has(
      override_error(
          {"optim.name=sgd", "optim.nesterov=true", "optim.momentum=0"}),
      {"optim.nesterov needs optim.momentum > 0"});
  expect_has(
      override_error({"model.image_size=32"}),
      {"data.name fashion_mnist", "model.image_size must be 28, got 32"});
  expect_has(
      override_error({"model.channels=3"}),
      {"data.name fashion_mnist", "model.channels must be 1, got 3"});
  expect_has(
      override_error({"model.num_classes=5"}),
      {"data.name fashion_mnist", "model.num_classes must be 10, got 5"});
  expect_has(
      override_error({"model.kind=gpt"}),
      {"model.kind gpt needs data.name fortunes or synthetic, got "
       "fashion_mnist"});
  expect_has(
      override_error({"data.name=fortunes"}),
      {"model.kind mlp needs data.name fashion_mnist or synthetic, got "
       "fortunes"});
  expect_has(
      override_error({"model.kind=vit", "data.name=fortunes"}),
      {"model.kind vit needs data.name fashion_mnist or synthetic"});
  expect_has(
      override_error(
          {"model.kind=gpt", "data.name=fortunes", "model.vocab=512"}),
      {"data.name fortunes", "model.vocab must be 256", "got 512"});
  // Synthetic data takes any shapes.
  EXPECT_NO_THROW(load_config(
      "", {"model.kind=gpt", "data.name=synthetic", "model.vocab=512"}));
  EXPECT_NO_THROW(load_config(
      "", {"data.name=synthetic", "model.image_size=32", "model.channels=3"}));
}

TEST(Config, JsonRoundTrip) {
  Config c = load_config(
      "",
      {"run.name=rt",
       "model.kind=gpt",
       "model.hidden=[7, 9, 11]",
       "model.activation=relu",
       "model.pool=mean",
       "model.dropout=0.1",
       "model.init_std=0.015",
       "data.name=fortunes",
       "data.path=/x/y",
       "train.steps=12345",
       "train.seed=18446744073709551615",
       "train.resume=latest",
       "optim.name=sgd",
       "optim.lr=3e-4",
       "optim.eps=1e-7",
       "optim.beta2=0.95",
       "optim.momentum=0.3333333",
       "optim.schedule=constant",
       "optim.warmup_steps=0",
       "optim.warmup_epochs=0.5",
       "optim.scale_lr=sqrt",
       "optim.base_batch=256",
       "parallel.sp=2",
       "parallel.sp_attention=ulysses",
       "train.mem_cap_mb=96.5"});
  nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j["train"]["mem_cap_mb"], 96.5);
  EXPECT_EQ(j["parallel"]["sp"], 2);
  EXPECT_EQ(j["parallel"]["sp_attention"], "ulysses");
  EXPECT_EQ(j["optim"]["scale_lr"], "sqrt");
  EXPECT_EQ(j["optim"]["base_batch"], 256);
  EXPECT_EQ(j["model"]["kind"], "gpt");
  EXPECT_EQ(j["model"]["hidden"], nlohmann::json({7, 9, 11}));
  EXPECT_EQ(j["data"]["name"], "fortunes");
  EXPECT_EQ(j["optim"]["schedule"], "constant");
  EXPECT_EQ(j["train"]["seed"], 18446744073709551615u);
  EXPECT_EQ(j["optim"]["lr"].dump(), "0.0003");  // readable, not 0.000299...
  EXPECT_EQ(j["run"].size(), 2u);
  EXPECT_EQ(j["model"].size(), 16u);
  EXPECT_EQ(j["data"].size(), 6u);
  EXPECT_EQ(j["train"].size(), 12u);
  EXPECT_EQ(j["optim"].size(), 21u);
  EXPECT_EQ(j["parallel"].size(), 18u);
  EXPECT_EQ(j["parallel"]["zero"], 0);
  EXPECT_EQ(j["parallel"]["defer_broadcast"], true);
  EXPECT_EQ(j["comm"].size(), 1u);
  EXPECT_EQ(j["verify"].size(), 1u);

  Config back = config_from_json(j);
  EXPECT_EQ(config_to_json(back), j);
  // Through text as well, as a manifest would be stored.
  Config parsed = config_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(config_to_json(parsed), j);
  EXPECT_EQ(parsed.optim.lr, c.optim.lr);
  EXPECT_EQ(parsed.optim.momentum, c.optim.momentum);
  EXPECT_EQ(parsed.model.init_std, c.model.init_std);
  EXPECT_EQ(parsed.train.seed, c.train.seed);

  EXPECT_EQ(
      config_to_json(config_from_json(config_to_json(Config{}))),
      config_to_json(Config{}));
}

TEST(Config, FromJsonValidates) {
  nlohmann::json j = config_to_json(Config{});
  nlohmann::json bad = j;
  bad["optim"]["lrr"] = 0.1;
  expect_has(
      error_of([&] { config_from_json(bad); }),
      {"unknown config key 'optim.lrr'", "did you mean 'optim.lr'?"});
  bad = j;
  bad["train"]["steps"] = "100";
  expect_has(
      error_of([&] { config_from_json(bad); }),
      {"config key 'train.steps' must be an integer"});
  bad = j;
  bad["train"]["steps"] = 1.5;
  expect_has(
      error_of([&] { config_from_json(bad); }),
      {"config key 'train.steps' must be an integer, got '1.5'"});
  bad = j;
  bad["model"]["dropout"] = 1.5;
  expect_has(
      error_of([&] { config_from_json(bad); }),
      {"config key 'model.dropout' must be in [0, 1), got 1.5"});
  bad = j;
  bad["optim"]["name"] = "adam";
  expect_has(
      error_of([&] { config_from_json(bad); }),
      {"must be one of sgd, adamw, lars, lamb, got 'adam'"});
  bad = j;
  bad["train"] = 5;
  expect_has(
      error_of([&] { config_from_json(bad); }),
      {"config section 'train' must be a map"});
  expect_has(
      error_of([] { config_from_json(nlohmann::json::array()); }),
      {"must be a map of sections"});
  // Missing keys take their defaults, as in YAML.
  nlohmann::json partial = {{"train", {{"steps", 77}}}};
  EXPECT_EQ(config_from_json(partial).train.steps, 77);
}

TEST(Config, ShippedConfigsLoad) {
  struct Shipped {
    const char* file;
    ModelKind kind;
    DatasetKind data;
  };
  for (Shipped s : {
           Shipped{
               "configs/fashion_mlp.yaml",
               ModelKind::kMlp,
               DatasetKind::kFashionMnist},
           Shipped{
               "configs/fashion_vit.yaml",
               ModelKind::kVit,
               DatasetKind::kFashionMnist},
           Shipped{
               "configs/fortunes_gpt.yaml",
               ModelKind::kGpt,
               DatasetKind::kFortunes},
       }) {
    SCOPED_TRACE(s.file);
    Config c;
    ASSERT_NO_THROW(c = load_config(test::source_path(s.file), {}));
    EXPECT_EQ(c.model.kind, s.kind);
    EXPECT_EQ(c.data.name, s.data);
    EXPECT_EQ(
        config_to_json(config_from_json(config_to_json(c))), config_to_json(c));
  }
}

}  // namespace
}  // namespace ndt

namespace ndt {
namespace {

TEST(Config, ParallelCommVerifyAndLargeBatchKeys) {
  Config c = load_config(
      "",
      {"parallel.dp=4",
       "parallel.dp_mode=threads",
       "parallel.microbatches=2",
       "parallel.bucket_mb=8",
       "comm.timeout_s=30",
       "verify.steps=3",
       "optim.name=lamb",
       "optim.lars_mode=colossal",
       "optim.trust_coef=0.01",
       "optim.trust_clip=10",
       "optim.lamb_bias_correction=false",
       "optim.exclude_no_decay=false"});
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.parallel.dp_mode, DpMode::kThreads);
  EXPECT_EQ(c.parallel.microbatches, 2);
  EXPECT_EQ(c.parallel.bucket_mb, 8.0f);
  EXPECT_EQ(c.comm.timeout_s, 30.0f);
  EXPECT_EQ(c.verify.steps, 3);
  EXPECT_EQ(c.optim.name, OptimKind::kLamb);
  EXPECT_EQ(c.optim.lars_mode, LarsModeKind::kColossal);
  EXPECT_EQ(c.optim.trust_coef, 0.01f);
  EXPECT_EQ(c.optim.trust_clip, 10.0f);
  EXPECT_FALSE(c.optim.lamb_bias_correction);
  EXPECT_FALSE(c.optim.exclude_no_decay);
  EXPECT_EQ(
      config_to_json(config_from_json(config_to_json(c))), config_to_json(c));
}

TEST(Config, BatchMustSplitOverReplicasAndMicroBatches) {
  try {
    load_config("", {"train.batch_size=100", "parallel.dp=3"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("train.batch_size (100)"), std::string::npos) << m;
    EXPECT_NE(m.find("parallel.dp (3)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace ndt
