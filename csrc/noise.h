// The coupled noise of docs/noise.md, bit for bit, in one place for every C++ backend: included by the CPU kernels
// (csrc/cpu/common.h) and, as host and device code, by the CUDA kernels (csrc/cuda/common.cuh). u32 arithmetic with
// wrap-around multiplication and logical shifts (lowbias32 mixing), 23-bit float32 uniforms.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(SPOT_EMULATE)
#define SPOT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPOT_HOST_DEVICE inline
#endif

namespace spot_noise {

constexpr uint32_t kGolden = 0x9E3779B9u;

// lowbias32 (C. Wellons).
SPOT_HOST_DEVICE uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// mix(mix(seed_lo ^ golden) ^ seed_hi): the seed's part of row_key, computed once per call on the host.
inline uint32_t seed_key(int64_t seed) {
  const uint64_t s = static_cast<uint64_t>(seed);
  return mix32(mix32(static_cast<uint32_t>(s) ^ kGolden) ^ static_cast<uint32_t>(s >> 32));
}

// row_key with the seed part precomputed; every argument is reduced to its low 32 bits (two's complement).
SPOT_HOST_DEVICE uint32_t row_key(uint32_t skey, int64_t row, int64_t pos, int64_t step) {
  uint32_t h = mix32(static_cast<uint32_t>(row) ^ skey);
  h = mix32(h ^ static_cast<uint32_t>(pos));
  return mix32(h ^ static_cast<uint32_t>(step));
}

SPOT_HOST_DEVICE uint32_t noise_word(uint32_t key, int64_t v) { return mix32(key ^ static_cast<uint32_t>(v)); }

// (float32(w >> 9) + 0.5) * 2^-23: exact, in [2^-24, 1 - 2^-24].
SPOT_HOST_DEVICE float uniform_from_word(uint32_t w) {
  return (static_cast<float>(w >> 9) + 0.5f) * 1.1920928955078125e-07f;
}

}  // namespace spot_noise
