// Shared helpers of the CPU C++ kernels (csrc/cpu/<family>.cpp): the coupled noise of docs/noise.md, bit for bit,
// and the per-row parallel loop. Plain C++; the compiler vectorises what it can, at the baseline ISA (no -march, see
// setup.py) or, in the functions a kernel builds once per SIMD level, at that level (csrc/cpu/simd.h).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "../noise.h"
#include "simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace spot_cpu {

// The coupled noise (csrc/noise.h, shared with the CUDA kernels).
using spot_noise::mix32;
using spot_noise::noise_word;
using spot_noise::row_key;
using spot_noise::seed_key;
using spot_noise::uniform_from_word;

// -log(-log(u)) in the compute dtype A (the float32 uniform converted to A first, as the reference does).
template <typename A>
SPOT_SIMD_INLINE A gumbel_from_word(uint32_t w) {
  const A u = static_cast<A>(uniform_from_word(w));
  return -std::log(-std::log(u));
}

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
