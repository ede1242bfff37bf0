// spot::_noise_uniform_cpu: coupled-noise uniforms (docs/noise.md, docs/ops.md "Coupled noise"; the oracle is
// spot_kernels/reference/noise.py).
//
// A TensorIterator broadcasts the four int64 inputs (reading each through its own strides, so an expanded
// [rows, 1] x [1, V] call reads O(rows + V) integers) and splits the work over threads. The row key
// (3 mixes) is recomputed only when (row, position, step) changes along the inner loop, so the usual
// [..., 1] x [V] call costs one mix per element.

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>

#include "common.h"

namespace spot_cpu {
namespace {

at::Tensor noise_uniform_cpu(int64_t seed, const at::Tensor& rows, const at::Tensor& positions, const at::Tensor& steps,
                             const at::Tensor& vocab_ids) {
  for (const at::Tensor* t : {&rows, &positions, &steps, &vocab_ids}) {
    TORCH_CHECK_TYPE(t->scalar_type() == at::kLong, "spot.noise_uniform: rows, positions, steps and vocab_ids must "
                     "be int64");
  }
  TORCH_CHECK_VALUE(seed >= 0, "spot.noise_uniform: seed must lie in [0, 2^63)");
  const auto shape = at::infer_size(at::infer_size(rows.sizes(), positions.sizes()),
                                    at::infer_size(steps.sizes(), vocab_ids.sizes()));
  at::Tensor out = at::empty(shape, rows.options().dtype(at::kFloat));
  if (out.numel() == 0) return out;

  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .add_output(out)
                                .add_const_input(rows)
                                .add_const_input(positions)
                                .add_const_input(steps)
                                .add_const_input(vocab_ids)
                                .build();
  const uint32_t skey = seed_key(seed);
  iter.for_each(
      [skey](char** data, const int64_t* strides, int64_t size0, int64_t size1) {
        constexpr int kT = 5;  // out, rows, positions, steps, vocab_ids
        for (int64_t i1 = 0; i1 < size1; ++i1) {
          char* p[kT];
          for (int t = 0; t < kT; ++t) p[t] = data[t] + i1 * strides[kT + t];
          bool have_key = false;
          int64_t last_r = 0, last_p = 0, last_s = 0;
          uint32_t key = 0;
          for (int64_t i0 = 0; i0 < size0; ++i0) {
            const int64_t r = *reinterpret_cast<const int64_t*>(p[1] + i0 * strides[1]);
            const int64_t pos = *reinterpret_cast<const int64_t*>(p[2] + i0 * strides[2]);
            const int64_t s = *reinterpret_cast<const int64_t*>(p[3] + i0 * strides[3]);
            const int64_t v = *reinterpret_cast<const int64_t*>(p[4] + i0 * strides[4]);
            if (!have_key || r != last_r || pos != last_p || s != last_s) {
              key = row_key(skey, r, pos, s);
              last_r = r;
              last_p = pos;
              last_s = s;
              have_key = true;
            }
            *reinterpret_cast<float*>(p[0] + i0 * strides[0]) = uniform_from_word(noise_word(key, v));
          }
        }
      },
      /*grain_size=*/int64_t{1} << 15);
  return out;
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_noise_uniform_cpu", &spot_cpu::noise_uniform_cpu); }
