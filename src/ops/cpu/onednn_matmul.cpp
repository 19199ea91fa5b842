// Cached oneDNN matmul primitives (onednn_matmul.h).
//
// oneDNN's matmul primitive runs its brgemm kernels, which measured faster
// than dnnl_sgemm on the products whose B is transposed (bench/gemm.sh,
// docs/performance.md "GEMM libraries"). A primitive is compiled for one
// shape, leading dimensions, alpha and beta, so each thread keeps a map
// from those to its primitive and memory objects; oneDNN's own primitive
// cache makes a second thread's creation of the same shape cheap. Every
// primitive is compiled for one thread (ops::gemm calls this only for products
// that run on one thread; inside a parallel region oneDNN would run it on the
// calling thread alone anyway).
#include "ops/cpu/onednn_matmul.h"

#include <omp.h>

#include <bit>
#include <cstdint>
#include <dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace ndt::ops {
namespace {

constexpr size_t kMaxEntries = 256;  // per thread

struct Key {
  bool ta, tb;
  int M, N, K, lda, ldb, ldc;
  uint32_t alpha, beta;  // bit patterns
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t{k.ta} | uint64_t{k.tb} << 1);
    for (int v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc})
      mix(static_cast<uint32_t>(v));
    mix(k.alpha);
    mix(k.beta);
    return static_cast<size_t>(h);
  }
};

struct Entry {
  // Empty when oneDNN has no brgemm matmul for the key.
  std::optional<dnnl::matmul> prim;
  dnnl::memory a, b, c;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The primitive for key, or an empty entry. Compiled for one thread: that
// is this thread's OpenMP default while oneDNN reads it.
Entry make_entry(const Key& k) {
  using dnnl::memory;
  const memory::dims a_dims{k.M, k.K}, b_dims{k.K, k.N}, c_dims{k.M, k.N};
  const memory::dims a_strides =
      k.ta ? memory::dims{1, k.lda} : memory::dims{k.lda, 1};
  const memory::dims b_strides =
      k.tb ? memory::dims{1, k.ldb} : memory::dims{k.ldb, 1};
  const memory::desc a_md(a_dims, memory::data_type::f32, a_strides);
  const memory::desc b_md(b_dims, memory::data_type::f32, b_strides);
  const memory::desc c_md(
      c_dims, memory::data_type::f32, memory::dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  const float alpha = std::bit_cast<float>(k.alpha);
  const float beta = std::bit_cast<float>(k.beta);
  if (alpha != 1.0f)
    attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  Entry e;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  try {
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(a_md, b_md, c_md), attr, cpu_engine());
    if (std::string(pd.impl_info_str()).starts_with("brg")) {
      e.prim.emplace(pd);
      e.a = memory(a_md, cpu_engine(), DNNL_MEMORY_NONE);
      e.b = memory(b_md, cpu_engine(), DNNL_MEMORY_NONE);
      e.c = memory(c_md, cpu_engine(), DNNL_MEMORY_NONE);
    }
  } catch (const dnnl::error&) {
    e.prim.reset();  // unsupported: dnnl_sgemm serves it
  }
  omp_set_num_threads(saved);
  return e;
}

}  // namespace

bool onednn_matmul(
    bool trans_a,
    bool trans_b,
    int M,
    int N,
    int K,
    float alpha,
    const float* A,
    int lda,
    const float* B,
    int ldb,
    float beta,
    float* C,
    int ldc) {
  thread_local std::unordered_map<Key, Entry, KeyHash> cache;
  thread_local dnnl::stream stream(cpu_engine());
  const Key key{
      trans_a,
      trans_b,
      M,
      N,
      K,
      lda,
      ldb,
      ldc,
      std::bit_cast<uint32_t>(alpha),
      std::bit_cast<uint32_t>(beta)};
  auto it = cache.find(key);
  if (it == cache.end()) {
    // A model has a handful of shapes; a sweep over many (a test) must not
    // grow the cache without bound.
    if (cache.size() >= kMaxEntries)
      cache.clear();
    it = cache.emplace(key, make_entry(key)).first;
  }
  Entry& e = it->second;
  if (!e.prim)
    return false;
  e.a.set_data_handle(const_cast<float*>(A));
  e.b.set_data_handle(const_cast<float*>(B));
  e.c.set_data_handle(C);
  e.prim->execute(
      stream,
      {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
  stream.wait();
  return true;
}

}  // namespace ndt::ops
