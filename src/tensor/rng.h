// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// A stream is identified by a 64-bit key derived from (seed, global name);
// element i of the stream is a pure function of (key, i). A rank that owns
// elements [a, b) of a tensor therefore generates exactly the values the
// serial run generates for them, whatever the layout (DESIGN.md principle 2).
// There is no hidden state: callers pass the key and the global index.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ndt {

// Key for the stream named `name` under `seed`.
uint64_t rng_key(uint64_t seed, std::string_view name);
// Key for a sub-stream (e.g. per step or per layer) of `key`.
uint64_t rng_subkey(uint64_t key, uint64_t index);

// The raw Philox block for counter (index, stream).
std::array<uint32_t, 4> philox4x32(
    uint64_t key, uint64_t index, uint64_t stream = 0);

// Uniform in [0, 1) for element `index`. All four words of a Philox block
// are used: in each aligned run of 128 indices, index 32 w + j takes word w
// of block j (blocks index / 128 * 32 + j), so 128 consecutive values cost
// 32 blocks and a vector of 32 blocks yields them as four contiguous runs.
float rng_uniform(uint64_t key, uint64_t index);
// Standard normal for element `index` (Box-Muller on one Philox block).
float rng_normal(uint64_t key, uint64_t index);
// Uniform 64-bit integer for element `index`.
uint64_t rng_u64(uint64_t key, uint64_t index);

// out[i] = mean + std * normal(key, offset + i) for i in [0, n).
void rng_fill_normal(
    float* out,
    int64_t n,
    uint64_t key,
    uint64_t offset,
    float mean,
    float std);
// out[i] = lo + (hi - lo) * uniform(key, offset + i).
void rng_fill_uniform(
    float* out, int64_t n, uint64_t key, uint64_t offset, float lo, float hi);

}  // namespace ndt
