#include "tensor/rng.h"

#include <cmath>

namespace ndt {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;
constexpr uint32_t kW1 = 0xBB67AE85u;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float to_unit(uint32_t x) {
  // 24 random bits -> [0, 1) exactly representable in fp32.
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

}  // namespace

uint64_t rng_key(uint64_t seed, std::string_view name) {
  // FNV-1a over the name, mixed with the seed.
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return splitmix64(splitmix64(seed) ^ h);
}

uint64_t rng_subkey(uint64_t key, uint64_t index) {
  return splitmix64(key ^ splitmix64(index + 0x632BE59BD9B4E019ull));
}

std::array<uint32_t, 4> philox4x32(
    uint64_t key, uint64_t index, uint64_t stream) {
  uint32_t c0 = static_cast<uint32_t>(index);
  uint32_t c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream);
  uint32_t c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(key);
  uint32_t k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    uint32_t lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    uint32_t lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n1 = lo1;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    uint32_t n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

float rng_uniform(uint64_t key, uint64_t index) {
  const uint64_t block = (index >> 7 << 5) | (index & 31);
  return to_unit(philox4x32(key, block)[(index >> 5) & 3]);
}

uint64_t rng_u64(uint64_t key, uint64_t index) {
  auto b = philox4x32(key, index);
  return (static_cast<uint64_t>(b[1]) << 32) | b[0];
}

float rng_normal(uint64_t key, uint64_t index) {
  auto b = philox4x32(key, index);
  // u1 in (0, 1] so log() is finite.
  double u1 = (static_cast<double>(b[0]) + 1.0) / 4294967296.0;
  double u2 = static_cast<double>(b[1]) / 4294967296.0;
  double r = std::sqrt(-2.0 * std::log(u1));
  return static_cast<float>(r * std::cos(6.283185307179586 * u2));
}

void rng_fill_normal(
    float* out,
    int64_t n,
    uint64_t key,
    uint64_t offset,
    float mean,
    float std) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = mean + std * rng_normal(key, offset + static_cast<uint64_t>(i));
  }
}

void rng_fill_uniform(
    float* out, int64_t n, uint64_t key, uint64_t offset, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] =
        lo + (hi - lo) * rng_uniform(key, offset + static_cast<uint64_t>(i));
  }
}

}  // namespace ndt
