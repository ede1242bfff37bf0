// Run-time SIMD levels for the hot loops of the CPU kernels (csrc/cpu/<family>.cpp), chosen the way ATen chooses
// its own kernels: the extension is built without -march (it must load on any x86-64 / aarch64 CPU), and each opted-in
// function is compiled once per level and called at the level ATen runs at.
//
// Levels (x86-64, GCC or Clang): "default" (the baseline ISA, SSE2), "avx2" (AVX2 + FMA, what ATen's AVX2 level
// requires) and "avx512" (AVX-512 F/BW/VL/DQ + FMA, ATen's AVX512 level). The level is ATen's,
// at::get_cpu_capability(): the best the CPU and OS support, or lower when ATEN_CPU_CAPABILITY asks for it, read
// once per process. So `ATEN_CPU_CAPABILITY=avx2 python ...` runs ATen and these kernels at AVX2 on an AVX-512
// machine, and the tests and bench/bench_cpu.py can pin each level. Other CPUs (aarch64, where NEON is part of the
// baseline ISA and the "default" copy already uses it; ppc64le; s390x) and other compilers build the "default" copy
// only.
//
// How: a level's copy is the same source inlined into a function carrying the level's target attribute (GCC/Clang
// __attribute__((target(...))), as SPOT_CPU_CLONES did for AVX2 alone), so the vectoriser emits that ISA for it and
// for every helper inlined into it. Nothing else is compiled above the baseline: no header's inline function is ever
// emitted at a higher ISA and picked by the linker for baseline code (the risk of building whole translation units
// with -mavx2), and setup.py needs no per-file flags.
//
// Opting a kernel in (score.cpp is the example):
//   1. Write the hot function as a template marked SPOT_SIMD_INLINE (always inlined), its template parameters
//      deducible from its arguments; mark the small helpers it calls inside vector loops SPOT_SIMD_INLINE too (a
//      helper left out of line runs at the baseline ISA: correct, slower).
//   2. SPOT_SIMD_LEVELS(name, body) defines `name(args...)`, which calls body's copy for simd_level().
//   3. Call `name(...)` where the body was called (per row is fine: the switch is one predictable branch).
// A kernel that needs the same bits at every level writes its loops so (no reduction whose order follows the vector
// width, no float multiply-add contraction: -ffp-contract is GCC's "fast" by default, which fuses a * b + c into an
// FMA wherever the ISA has one); docs/ops.md says what each kernel promises across levels.
#pragma once

#include <utility>

namespace spot_cpu {

enum class Simd : int { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };

// The level of this process (ATen's, capped at the levels this build has), decided on the first call.
Simd simd_level();

// "default", "avx2" or "avx512".
const char* simd_name(Simd level);

// The levels this build compiled, comma-separated ("default,avx2,avx512" on x86-64 with GCC / Clang).
const char* simd_levels_built();

#define SPOT_SIMD_INLINE inline __attribute__((always_inline))

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPOT_SIMD_X86 1
// The ISA extensions ATen's levels require of the CPU (aten/src/ATen/native/DispatchStub.cpp), nothing more.
#define SPOT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define SPOT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

#define SPOT_SIMD_LEVELS(name, body)                                                                              \
  template <typename... Args>                                                                                     \
  void name##_default(Args&&... args) {                                                                           \
    body(std::forward<Args>(args)...);                                                                            \
  }                                                                                                               \
  template <typename... Args>                                                                                     \
  SPOT_TARGET_AVX2 void name##_avx2(Args&&... args) {                                                             \
    body(std::forward<Args>(args)...);                                                                            \
  }                                                                                                               \
  template <typename... Args>                                                                                     \
  SPOT_TARGET_AVX512 void name##_avx512(Args&&... args) {                                                         \
    body(std::forward<Args>(args)...);                                                                            \
  }                                                                                                               \
  template <typename... Args>                                                                                     \
  void name(Args&&... args) {                                                                                     \
    switch (::spot_cpu::simd_level()) {                                                                           \
      case ::spot_cpu::Simd::kAvx512:                                                                             \
        return name##_avx512(std::forward<Args>(args)...);                                                        \
      case ::spot_cpu::Simd::kAvx2:                                                                               \
        return name##_avx2(std::forward<Args>(args)...);                                                          \
      default:                                                                                                    \
        return name##_default(std::forward<Args>(args)...);                                                       \
    }                                                                                                             \
  }
#else
#define SPOT_SIMD_X86 0
#define SPOT_SIMD_LEVELS(name, body)                \
  template <typename... Args>                       \
  void name(Args&&... args) {                       \
    body(std::forward<Args>(args)...);              \
  }
#endif

}  // namespace spot_cpu
