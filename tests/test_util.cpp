#include "test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "tensor/rng.h"

namespace ndt::test {

Tensor randn(Shape shape, uint64_t seed, std::string_view name, float std) {
  Tensor t(std::move(shape), MemTag::kOther);
  rng_fill_normal(t.data(), t.numel(), rng_key(seed, name), 0, 0.0f, std);
  return t;
}

Tensor grid_block(const Tensor& t, int q, int i, int j) {
  return grid_block(t, q, i, q, j);
}

Tensor grid_block(const Tensor& t, int rows, int r, int cols, int j) {
  const int64_t C = t.dim(-1), C_local = C / cols;
  const int64_t n = t.numel() / C, n_local = n / rows;
  Shape shape = t.shape();
  shape.front() /= rows;
  shape.back() = C_local;
  Tensor out(shape, MemTag::kOther);
  for (int64_t a = 0; a < n_local; ++a) {
    for (int64_t c = 0; c < C_local; ++c) {
      out.data()[a * C_local + c] =
          t.data()[(r * n_local + a) * C + j * C_local + c];
    }
  }
  return out;
}

Tensor int_tensor(Shape shape, int modulo, int mul, int add) {
  Tensor t(std::move(shape), MemTag::kOther, DType::kI32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_i32()[i] = static_cast<int32_t>((i * mul + add) % modulo);
  return t;
}

double close_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  if (a.numel() != b.numel())
    return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.data()[i], y = b.data()[i];
    double r = std::fabs(x - y) / (atol + rtol * std::fabs(y));
    if (!(r <= worst))
      worst = std::isnan(r) ? INFINITY : std::max(worst, r);
  }
  return worst;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    s += double(a.data()[i]) * double(b.data()[i]);
  }
  return s;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel())
    return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = std::fabs(double(a.data()[i]) - double(b.data()[i]));
    if (!(d <= worst))
      worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return INFINITY;
  double scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    scale = std::max(scale, std::fabs(double(b.data()[i])));
  return max_abs_diff(a, b) / std::max(scale, 1e-30);
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) {
    EXPECT_NE(msg.find(p), std::string::npos)
        << "message: " << msg << "\nmissing: " << p;
  }
}

std::string source_path(const std::string& rel) {
  return std::string(NDT_SOURCE_DIR) + "/" + rel;
}

std::map<std::string, Tensor> read_fixture(const std::string& path) {
  std::map<std::string, Tensor> out;
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open fixture " << path;
    return out;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream header(line);
    std::string name;
    int ndim = -1;
    header >> name >> ndim;
    Shape shape(std::max(ndim, 0));
    for (auto& d : shape)
      header >> d;
    if (!header || ndim < 0) {
      ADD_FAILURE() << path << ": bad header line: " << line;
      return out;
    }
    Tensor t(shape, MemTag::kOther);
    std::getline(in, line);
    std::istringstream values(line);
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = 0;
      if (!(values >> v)) {
        ADD_FAILURE() << path << ": tensor " << name << " has fewer than "
                      << t.numel() << " values";
        return out;
      }
      t.data()[i] = static_cast<float>(v);
    }
    out.emplace(name, t);
  }
  return out;
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("ndt_test-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter++) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(
      std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path_)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

double grad_check(
    Tensor& x,
    const Tensor& grad,
    const std::function<double()>& loss,
    double h,
    double atol,
    double rtol,
    int samples) {
  int64_t n = x.numel();
  int64_t count = (samples <= 0 || samples >= n) ? n : samples;
  double worst = 0;
  for (int64_t s = 0; s < count; ++s) {
    int64_t i = count == n ? s : (s * 7919 + 13) % n;
    float saved = x.data()[i];
    x.data()[i] = saved + static_cast<float>(h);
    double lp = loss();
    x.data()[i] = saved - static_cast<float>(h);
    double lm = loss();
    x.data()[i] = saved;
    double num = (lp - lm) / (2 * h);
    double ana = grad.data()[i];
    double r = std::fabs(num - ana) / (atol + rtol * std::fabs(num));
    if (std::isnan(r))
      return INFINITY;
    worst = std::max(worst, r);
  }
  return worst;
}

}  // namespace ndt::test
