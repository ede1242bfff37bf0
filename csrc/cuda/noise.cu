// spot::_noise_uniform_cuda: coupled-noise uniforms (docs/noise.md, docs/ops.md "Coupled noise").
//
// One thread per output element (grid-stride). The four int64 inputs broadcast against each other; they are read
// through their own strides (stride 0 on broadcast dimensions), after merging dimensions that are contiguous for
// all four, so an expanded [rows, 1] x [1, V] call reads O(rows + V) integers.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kMaxDims = 8;

struct Strided {
  int64_t size[kMaxDims];
  int64_t stride[4][kMaxDims];
  int ndim;
};

__global__ void noise_uniform_kernel(uint32_t skey, const int64_t* __restrict__ rows,
                                     const int64_t* __restrict__ positions, const int64_t* __restrict__ steps,
                                     const int64_t* __restrict__ vocab, float* __restrict__ out, int64_t n,
                                     Strided layout) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i;
    int64_t off[4] = {0, 0, 0, 0};
    for (int d = layout.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % layout.size[d];
      rem /= layout.size[d];
#pragma unroll
      for (int t = 0; t < 4; ++t) off[t] += c * layout.stride[t][d];
    }
    const uint32_t key = row_key(skey, rows[off[0]], positions[off[1]], steps[off[2]]);
    out[i] = uniform_from_word(noise_word(key, vocab[off[3]]));
  }
}

at::Tensor noise_uniform_cuda(int64_t seed, const at::Tensor& rows, const at::Tensor& positions,
                              const at::Tensor& steps, const at::Tensor& vocab_ids) {
  const char* op = "noise_uniform";
  const at::Tensor* ins[4] = {&rows, &positions, &steps, &vocab_ids};
  const char* names[4] = {"rows", "positions", "steps", "vocab_ids"};
  for (int t = 0; t < 4; ++t) check_dtype(op, names[t], *ins[t], at::kLong);
  check_seed(op, seed);

  // Broadcast shape (numpy rules), with a clear error when the shapes do not broadcast.
  int64_t ndim = 0;
  for (auto* t : ins) ndim = std::max<int64_t>(ndim, t->dim());
  std::vector<int64_t> shape(ndim, 1);
  for (int t = 0; t < 4; ++t) {
    const int64_t lead = ndim - ins[t]->dim();
    for (int64_t d = 0; d < ins[t]->dim(); ++d) {
      const int64_t s = ins[t]->size(d);
      int64_t& o = shape[lead + d];
      TORCH_CHECK_VALUE(s == o || s == 1 || o == 1, "spot.", op,
                        ": rows, positions, steps and vocab_ids must broadcast; got rows=",
                        shape_str(rows.sizes()), ", positions=", shape_str(positions.sizes()), ", steps=",
                        shape_str(steps.sizes()), ", vocab_ids=", shape_str(vocab_ids.sizes()));
      if (o == 1) o = s;
    }
  }
  check_cuda(op, {{"rows", &rows}, {"positions", &positions}, {"steps", &steps}, {"vocab_ids", &vocab_ids}});
  c10::cuda::CUDAGuard guard(rows.device());
  at::Tensor out = at::empty(shape, rows.options().dtype(at::kFloat));
  const int64_t n = out.numel();
  if (n == 0) return out;

  // Per-input strides over the broadcast shape (0 where broadcast); size-1 dimensions dropped; dimensions merged
  // where every input is contiguous across them.
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, 4>> strides;
  at::Tensor expanded[4];
  for (int t = 0; t < 4; ++t) expanded[t] = ins[t]->expand(shape);
  for (int64_t d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, 4> st;
    for (int t = 0; t < 4; ++t) st[t] = expanded[t].stride(d);
    if (!sizes.empty()) {
      bool merge = true;
      for (int t = 0; t < 4; ++t) merge = merge && strides.back()[t] == st[t] * shape[d];
      if (merge) {
        sizes.back() *= shape[d];
        strides.back() = st;
        continue;
      }
    }
    sizes.push_back(shape[d]);
    strides.push_back(st);
  }
  const int64_t* ptr[4];
  if (sizes.size() > static_cast<size_t>(kMaxDims)) {  // rare: materialise the broadcast, then index flat
    for (int t = 0; t < 4; ++t) expanded[t] = expanded[t].contiguous();
    sizes.assign(1, n);
    strides.assign(1, {1, 1, 1, 1});
  }
  for (int t = 0; t < 4; ++t) ptr[t] = expanded[t].data_ptr<int64_t>();
  Strided layout{};
  layout.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.size[d] = sizes[d];
    for (int t = 0; t < 4; ++t) layout.stride[t][d] = strides[d][t];
  }
  if (layout.ndim == 0) {  // a single element
    layout.ndim = 1;
    layout.size[0] = 1;
    for (int t = 0; t < 4; ++t) layout.stride[t][0] = 0;
  }

  const int threads = 256;
  const auto stream = c10::cuda::getCurrentCUDAStream(rows.device().index());
  auto kernel = noise_uniform_kernel;
  SPOT_LAUNCH(kernel, grid_for(n, threads, rows.device().index()), threads, 0, stream, seed_key(seed), ptr[0], ptr[1],
              ptr[2], ptr[3], out.data_ptr<float>(), n, layout);
  SPOT_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_noise_uniform_cuda", &spot_cuda::noise_uniform_cuda); }
