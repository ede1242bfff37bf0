// Shared helpers of the CUDA C++ kernels (csrc/cuda/<family>.cu): coupled noise (docs/noise.md), logit loads,
// warp reductions, argument checks and launch plumbing.
//
// Headers are kept light on purpose (no ATen/cuda/CUDAContext.h, which needs the cuBLAS/cuSPARSE headers):
// the current stream comes from c10/cuda/CUDAStream.h and the SM count from the CUDA runtime.
#pragma once

#include <torch/library.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

// SPOT_NS / SPOT_KEY: the library namespace and dispatch key the kernels register under; SPOT_LAUNCH: a kernel
// launch on a stream (`kernel` a single name: assign template instantiations to a variable first);
// SPOT_EXTERN_SHARED: the dynamic shared memory. Under SPOT_EMULATE (tests only, see emulate.h) the same sources
// compile with g++ into CPU ops `spot_emu::_<op>_cuda` run by a SIMT emulation.
// The .cu files only register implementations (TORCH_LIBRARY_IMPL); the schemas of `spot::_<op>_cuda` (and of the
// emulation's `spot_emu::_<op>_cuda`) are defined from Python, from the public schemas (spot_kernels/registry.py).
#ifdef SPOT_EMULATE
#include "emulate.h"
#define SPOT_NS spot_emu
#define SPOT_KEY CPU
#define SPOT_LAUNCH(kernel, grid, block, smem, stream, ...) \
  spot_emu::launch(kernel, dim3(grid), dim3(block), smem, __VA_ARGS__)
#define SPOT_EXTERN_SHARED(type, name) type* name = static_cast<type*>(spot_emu::dynamic_smem())
#else
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_fp16.h>
#define SPOT_NS spot
#define SPOT_KEY CUDA
#define SPOT_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define SPOT_EXTERN_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

#include "../noise.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace spot_cuda {

// ------------------------------------------------------------------------------------------------ coupled noise
// docs/noise.md, bit for bit (csrc/noise.h, shared with the CPU kernels).

using spot_noise::mix32;
using spot_noise::noise_word;
using spot_noise::row_key;
using spot_noise::seed_key;
using spot_noise::uniform_from_word;

__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }
__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }

// -log(-log(u)) in the compute dtype A (the float32 uniform converted to A first, as the reference does).
template <typename A>
__device__ __forceinline__ A gumbel_from_word(uint32_t w) {
  const A u = static_cast<A>(uniform_from_word(w));
  return -dlog(-dlog(u));
}

// ----------------------------------------------------------------------------------------------- logit loads
// Logits are read through their storage type and converted exactly to the compute dtype.
enum class In { kF16, kBF16, kF32, kF64 };

// storage: the element type read from memory (the 16-bit formats as raw bits); acc: the compute dtype (float64 for
// float64 logits, else float32).
template <In I>
struct InTraits {
  using acc = std::conditional_t<I == In::kF64, double, float>;
  using storage = std::conditional_t<I == In::kF16 || I == In::kBF16, uint16_t, acc>;
};

template <In I>
__device__ __forceinline__ typename InTraits<I>::acc load_as_acc(const typename InTraits<I>::storage* p,
                                                                  int64_t i) {
  if constexpr (I == In::kF16) {
    return __half2float(__ushort_as_half(__ldg(p + i)));
  } else if constexpr (I == In::kBF16) {
    return __uint_as_float(static_cast<uint32_t>(__ldg(p + i)) << 16);
  } else {
    return __ldg(p + i);
  }
}

template <typename A>
__host__ __device__ __forceinline__ A inf_of() {
  return std::numeric_limits<A>::infinity();
}

// ---------------------------------------------------------------------------------------------- warp helpers
constexpr unsigned kFullMask = 0xFFFFFFFFu;

template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(kFullMask, v, lane_mask);
}
template <typename T>
__device__ __forceinline__ T shfl(T v, int src) {
  return __shfl_sync(kFullMask, v, src);
}

// ---------------------------------------------------------------------------------------------- host helpers
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Number of SMs of a device, looked up once (cudaDeviceGetAttribute is not a stream operation: capture-safe).
inline int sm_count(int device) {
  static std::atomic<int> cache[64] = {};
  if (device < 0 || device >= 64) return 108;
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      n = 108;
    }
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Grid size for a grid-stride loop over n work items.
inline unsigned grid_for(int64_t n, int threads, int device) {
  const int64_t want = ceil_div(n, threads);
  const int64_t cap = static_cast<int64_t>(sm_count(device)) * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap)));
}

inline std::string dtype_name(c10::ScalarType t) {
  std::string s = c10::toString(t);
  // c10 names ("Float", "BFloat16") -> torch names ("float32", "bfloat16") as the Python checks print them.
  if (s == "Half") return "float16";
  if (s == "BFloat16") return "bfloat16";
  if (s == "Float") return "float32";
  if (s == "Double") return "float64";
  if (s == "Long") return "int64";
  if (s == "Int") return "int32";
  if (s == "Bool") return "bool";
  return s;
}

inline std::string shape_str(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Structural checks of the private ops. The Python router has already validated the call (docs/ops.md), so these
// are the cheap ones (dtype, shape, device) that keep a direct call of torch.ops.spot._<op>_cuda memory-safe.
// Messages follow spot_kernels/checks.py: "spot.<op>: <argument> must ..., got ...".
inline void check_dtype(const char* op, const char* name, const at::Tensor& t, c10::ScalarType want) {
  TORCH_CHECK_TYPE(t.scalar_type() == want, "spot.", op, ": ", name, " must have dtype ", dtype_name(want),
                   ", got ", dtype_name(t.scalar_type()));
}

inline void check_shape(const char* op, const char* name, const at::Tensor& t, c10::IntArrayRef want,
                        const char* what) {
  TORCH_CHECK_VALUE(t.sizes() == want, "spot.", op, ": ", name, " must have shape ", shape_str(want), " (", what,
                    "), got ", shape_str(t.sizes()));
}

// Every tensor on one CUDA device (checked last, so that shape and dtype errors read the same on any device).
inline void check_cuda(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> ts) {
  const auto& first = *ts.begin();
  for (const auto& [name, t] : ts) {
#ifndef SPOT_EMULATE
    TORCH_CHECK_VALUE(t->is_cuda(), "spot.", op, " (cuda backend): ", name, " must be a CUDA tensor, got ",
                      t->device().str());
#endif
    TORCH_CHECK_VALUE(t->device() == first.second->device(), "spot.", op, ": ", name, " is on ", t->device().str(),
                      " but ", first.first, " is on ", first.second->device().str(),
                      "; all tensors must be on one device");
  }
}

inline void check_seed(const char* op, int64_t seed) {
  TORCH_CHECK_VALUE(seed >= 0, "spot.", op, ": seed must lie in [0, 9223372036854775808), got ", seed);
}

inline void check_temperature(const char* op, double t) {
  TORCH_CHECK_VALUE(std::isfinite(t) && t >= 0, "spot.", op, ": temperature must be finite and >= 0, got ", t);
}

}  // namespace spot_cuda

#define SPOT_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()
