// Shared helpers of the CPU C++ kernels (csrc/cpu/<family>.cpp): the coupled noise of docs/noise.md, bit for bit,
// and the per-row parallel loop. Plain C++; the compiler vectorises what it can (no -march=native, see setup.py).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace spot_cpu {

// lowbias32 (C. Wellons): u32 arithmetic with wrap-around multiplication and logical shifts.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// mix(mix(seed_lo ^ golden) ^ seed_hi): the seed's part of row_key, computed once per call.
inline uint32_t seed_key(int64_t seed) {
  const uint64_t s = static_cast<uint64_t>(seed);
  return mix32(mix32(static_cast<uint32_t>(s) ^ 0x9E3779B9u) ^ static_cast<uint32_t>(s >> 32));
}

// row_key with the seed part precomputed; every argument is reduced to its low 32 bits (two's complement).
inline uint32_t row_key(uint32_t skey, int64_t row, int64_t pos, int64_t step) {
  uint32_t h = mix32(static_cast<uint32_t>(row) ^ skey);
  h = mix32(h ^ static_cast<uint32_t>(pos));
  return mix32(h ^ static_cast<uint32_t>(step));
}

inline uint32_t noise_word(uint32_t key, int64_t v) { return mix32(key ^ static_cast<uint32_t>(v)); }

// (float32(w >> 9) + 0.5) * 2^-23: exact, in [2^-24, 1 - 2^-24].
inline float uniform_from_word(uint32_t w) {
  return (static_cast<float>(w >> 9) + 0.5f) * 1.1920928955078125e-07f;
}

// -log(-log(u)) in the compute dtype A (the float32 uniform converted to A first, as the reference does).
template <typename A>
inline A gumbel_from_word(uint32_t w) {
  const A u = static_cast<A>(uniform_from_word(w));
  return -std::log(-std::log(u));
}

// SPOT_CPU_CLONES: compile a hot function twice, for the baseline ISA and for AVX2, the loader picking the clone the
// CPU supports (GCC/Clang function multi-versioning, an ifunc). So the extension needs no -march and still runs 8-wide
// where it can. Only "avx2" (not "fma"): no multiply-add contraction, the same roundings in both clones.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define SPOT_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SPOT_CPU_CLONES
#endif

template <typename A>
constexpr A inf_of() {
  return std::numeric_limits<A>::infinity();
}

// Compute dtype of a logits dtype: float64 for float64, else float32 (docs/ops.md).
template <typename S>
using acc_of = typename std::conditional<std::is_same<S, double>::value, double, float>::type;

// at::parallel_for over [0, n) items of about `work` elementary operations each: small calls stay on one thread.
template <typename F>
inline void parallel_rows(int64_t n, int64_t work, const F& f) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(work, 1));
  at::parallel_for(0, n, grain, f);
}

}  // namespace spot_cpu
