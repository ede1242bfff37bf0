// CPU emulation of the CUDA subset that csrc/cuda/*.cu use, for tests on machines without a GPU.
//
// Compiled only with -DSPOT_EMULATE (tests/helpers.py builds the .cu files with g++ into a test-only extension
// whose ops live in the `spot_emu` namespace under the CPU key, their schemas defined from Python as the shipped
// ones are); never part of the shipped extension. The CUDA threads of a block are cooperative fibers on one OS
// thread: __syncthreads waits for every live thread of the block, a warp shuffle or __syncwarp for every live thread
// of the warp (through double-buffered per-warp slots), __shared__ variables are function statics (blocks run one
// after another) and the dynamic shared memory is a per-launch buffer. Threads that return early leave the
// barriers, as exited threads do on a GPU; a barrier that can never complete (divergent __syncthreads) aborts with
// a message. This runs the kernels' real code (indexing,
// reductions, merges, launch sequences) on CPU tensors; it says nothing about performance or memory-model races,
// and CUDA's libm may differ from glibc's by an ulp.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// The SM count steers the vocabulary split of score: SPOT_EMULATE_SMS (default 8) keeps both paths reachable with
// small test shapes. The opt-in shared memory per block is an H100's (227 KB), which decides where order_logits keeps
// a node's activations.
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  if (attr == cudaDevAttrMaxSharedMemoryPerBlockOptin) {
    *value = 227 * 1024;
    return cudaSuccess;
  }
  const char* env = std::getenv("SPOT_EMULATE_SMS");
  *value = env != nullptr ? std::atoi(env) : 8;
  return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}

#define C10_CUDA_CHECK(expr) (void)(expr)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() \
  do {                                 \
  } while (0)

namespace c10::cuda {
inline cudaStream_t getCurrentCUDAStream(c10::DeviceIndex = -1) { return nullptr; }
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
};
}  // namespace c10::cuda

// ------------------------------------------------------------------------------------------------ half, bits
struct __half {
  uint16_t bits;
};
inline __half __ushort_as_half(uint16_t b) { return __half{b}; }
inline uint16_t __half_as_ushort(__half h) { return h.bits; }
inline float __half2float(__half h) { return c10::detail::fp16_ieee_to_fp32_value(h.bits); }
inline __half __float2half_rn(float f) { return __half{c10::detail::fp16_ieee_from_fp32_value(f)}; }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

// ------------------------------------------------------------------------------------------- SIMT emulation
// Cooperative fibers on the calling OS thread: each CUDA thread of a block runs on its own stack and gives the CPU
// back only at a barrier (__syncthreads, or a warp shuffle), so a barrier costs a few context switches of a few
// nanoseconds (callee-saved registers and the stack pointer; x86-64 System V only).
namespace spot_emu {

#if !defined(__x86_64__)
#error "the CUDA emulation (SPOT_EMULATE) needs x86-64"
#endif

// Save the callee-saved registers on the current stack, store its pointer in *from, switch to the stack `to`.
__attribute__((naked, noinline)) static void switch_stack(void** /*from*/, void* /*to*/) {
  asm volatile(
      "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
      "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
      "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}

struct Ctx {
  dim3 tid, bid, bdim, gdim;
};

enum class State { kRunnable, kBlockWait, kWarpWait, kDone };

struct Fiber {
  Ctx ctx;
  void* sp = nullptr;
  State state = State::kRunnable;
  unsigned shuffles = 0;  // parity selects the slot buffer of the next shuffle
  std::unique_ptr<char[]> stack;
};

struct Sched {
  void* main_sp = nullptr;
  std::vector<Fiber> fibers;
  unsigned current = 0;
  unsigned live = 0, block_waiting = 0;
  std::vector<unsigned> warp_live, warp_waiting;
  std::vector<uint64_t> slots;  // [warp][2][32]
  std::vector<uint64_t> smem;   // dynamic shared memory, 8-byte aligned (16 via operator new)
  const std::function<void()>* body = nullptr;
};

inline thread_local Sched* sched = nullptr;
constexpr size_t kStackBytes = 64 * 1024;

inline Fiber& self() { return sched->fibers[sched->current]; }
inline Ctx& ctx() { return self().ctx; }
inline int lane() { return static_cast<int>(self().ctx.tid.x % 32); }
inline void yield_to_scheduler() { switch_stack(&self().sp, sched->main_sp); }

[[noreturn]] static void fiber_entry() {
  (*sched->body)();
  Fiber& f = self();
  f.state = State::kDone;
  --sched->live;
  --sched->warp_live[f.ctx.tid.x / 32];
  switch_stack(&f.sp, sched->main_sp);
  __builtin_unreachable();
}

inline void block_barrier() {
  self().state = State::kBlockWait;
  ++sched->block_waiting;
  yield_to_scheduler();
}

template <typename T>
inline T exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  Fiber& f = self();
  const unsigned warp = f.ctx.tid.x / 32;
  uint64_t* buf = sched->slots.data() + (warp * 2 + (f.shuffles & 1)) * 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  buf[lane()] = bits;
  f.state = State::kWarpWait;
  ++sched->warp_waiting[warp];
  yield_to_scheduler();
  ++self().shuffles;
  const uint64_t got = buf[src & 31];
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

inline void* dynamic_smem() { return sched->smem.data(); }

// Run kernel<<<grid, block, smem>>>(args...): blocks one after another, each block's threads as fibers.
template <typename... P, typename... Args>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  const unsigned threads = block.x * block.y * block.z;
  const unsigned warps = (threads + 31) / 32;
  const std::function<void()> body = [&] { kernel(args...); };
  Sched s;
  s.body = &body;
  s.fibers.resize(threads);
  for (auto& f : s.fibers) f.stack.reset(new char[kStackBytes]);
  Sched* outer = sched;
  sched = &s;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        s.live = threads;
        s.block_waiting = 0;
        s.warp_live.assign(warps, 0);
        s.warp_waiting.assign(warps, 0);
        s.slots.assign(static_cast<size_t>(warps) * 64, 0);
        s.smem.assign((smem + 7) / 8 + 1, 0);
        for (unsigned t = 0; t < threads; ++t) {
          Fiber& f = s.fibers[t];
          f.ctx.tid = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
          f.ctx.bid = dim3(bx, by, bz);
          f.ctx.bdim = block;
          f.ctx.gdim = grid;
          f.state = State::kRunnable;
          f.shuffles = 0;
          ++s.warp_live[t / 32];
          // A fresh stack whose first switch "returns" into fiber_entry, aligned as after a call.
          auto* top = reinterpret_cast<uintptr_t*>(
              (reinterpret_cast<uintptr_t>(f.stack.get()) + kStackBytes) & ~static_cast<uintptr_t>(15));
          *--top = 0;                                            // fake return address of fiber_entry
          *--top = reinterpret_cast<uintptr_t>(&fiber_entry);  // popped by `ret`
          for (int r = 0; r < 6; ++r) *--top = 0;              // rbp, rbx, r12-r15
          f.sp = top;
        }
        while (s.live > 0) {
          bool progress = false;
          for (unsigned t = 0; t < threads; ++t) {
            if (s.fibers[t].state != State::kRunnable) continue;
            s.current = t;
            switch_stack(&s.main_sp, s.fibers[t].sp);
            progress = true;
          }
          if (s.block_waiting > 0 && s.block_waiting == s.live) {
            for (auto& f : s.fibers) {
              if (f.state == State::kBlockWait) f.state = State::kRunnable;
            }
            s.block_waiting = 0;
            progress = true;
          }
          for (unsigned w = 0; w < warps; ++w) {
            if (s.warp_waiting[w] > 0 && s.warp_waiting[w] == s.warp_live[w]) {
              for (unsigned t = w * 32; t < std::min(threads, w * 32 + 32); ++t) {
                if (s.fibers[t].state == State::kWarpWait) s.fibers[t].state = State::kRunnable;
              }
              s.warp_waiting[w] = 0;
              progress = true;
            }
          }
          if (!progress) {
            std::fprintf(stderr, "spot_emu: deadlock (divergent barrier) in block (%u, %u, %u)\n", bx, by, bz);
            std::abort();
          }
        }
      }
    }
  }
  sched = outer;
}

}  // namespace spot_emu

#define threadIdx (spot_emu::ctx().tid)
#define blockIdx (spot_emu::ctx().bid)
#define blockDim (spot_emu::ctx().bdim)
#define gridDim (spot_emu::ctx().gdim)

inline void __syncthreads() { spot_emu::block_barrier(); }
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
  return spot_emu::exchange(v, src);
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  return spot_emu::exchange(v, spot_emu::lane() ^ lane_mask);
}
// A warp barrier (every live thread of the warp), as the exchange of a shuffle.
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { (void)spot_emu::exchange(0, spot_emu::lane()); }
template <typename T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta) {
  const int src = spot_emu::lane() + static_cast<int>(delta);
  return spot_emu::exchange(v, src < 32 ? src : spot_emu::lane());
}
