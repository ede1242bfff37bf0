// The process's SIMD level for the CPU kernels (csrc/cpu/simd.h): ATen's, read once.

#include "simd.h"

#include <ATen/Version.h>

#include <string>

namespace spot_cpu {

namespace {

Simd read_level() {
#if SPOT_SIMD_X86
  // "DEFAULT", "AVX2" or "AVX512": what ATen dispatches its own kernels to (the CPU's best, or ATEN_CPU_CAPABILITY's
  // when that is lower).
  const std::string aten = at::get_cpu_capability();
  if (aten == "AVX512") return Simd::kAvx512;
  if (aten == "AVX2") return Simd::kAvx2;
#endif
  return Simd::kDefault;
}

}  // namespace

Simd simd_level() {
  static const Simd level = read_level();
  return level;
}

const char* simd_name(Simd level) {
  switch (level) {
    case Simd::kAvx512:
      return "avx512";
    case Simd::kAvx2:
      return "avx2";
    default:
      return "default";
  }
}

const char* simd_levels_built() { return SPOT_SIMD_X86 ? "default,avx2,avx512" : "default"; }

}  // namespace spot_cpu
