// Tree attention (docs/ops.md, "Tree attention masks" and "Shared-prefix tree attention"):
//   spot::_tree_mask_cuda, _tree_mask_additive_cuda, _tree_mask_packed_cuda, _tree_position_ids_cuda,
//   spot::_tree_attention_cuda.
//
// Mask builders: grid-stride loops; the dense masks are written 16 bytes per thread (one vector store), the
// additive mask from the bit patterns of 0 and -inf in the requested dtype (taken from torch on the host, so every
// floating dtype, float8 included, gets exactly the reference's values), the packed mask one int32 word per thread.
//
// Fused attention (CUDA cores, fp32 accumulation; fp64 for fp64): one block of 256 threads serves 64 query rows of
// one (row b, kv head): the G grouped query heads x N nodes x B positions that share that kv head. The block streams
// the row's valid prefix keys (key_start[b] <= k < P) through shared memory in tiles of 16 keys, so each prefix tile
// is loaded once for its 64 queries (all nodes, all grouped heads) and never replicated per node; each query is
// served by 4 threads that split the head dimension, with an online (flash) softmax in registers. The node's own B
// keys follow in the same softmax, read from global memory (they are few and shared by the node's B queries).
// Head dimensions up to 256 are supported (registers hold 1/4 of a query row and its accumulator).

#include "common.cuh"

#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

namespace spot_cuda {
namespace {

// ------------------------------------------------------------------------------------------------ mask rule
struct TreeGeom {
  int64_t prefix_len, num_new, block_size, n_q, n_k;
};

// The visibility rule of docs/ops.md (and of reference/tree_attention.py:_visible).
__device__ __forceinline__ bool visible(int64_t ks, int64_t q, int64_t k, const TreeGeom& g) {
  if (q < g.num_new) {
    const int64_t kq = g.prefix_len - g.num_new + q;
    if (kq < ks) return k == kq;  // a padding query sees only itself, so no row is empty
    return k >= ks && k <= kq;
  }
  if (k < ks) return false;
  if (k < g.prefix_len) return true;
  return (k - g.prefix_len) / g.block_size == (q - g.num_new) / g.block_size;
}

// The unsigned integer of ES bytes (1, 2, 4 or 8): one mask element's bit pattern.
template <int ES>
using Word = std::conditional_t<ES == 1, uint8_t,
                                std::conditional_t<ES == 2, uint16_t, std::conditional_t<ES == 4, uint32_t, uint64_t>>>;

// Dense [b, Q, K] mask of ES-byte elements: `on` where visible, `off` elsewhere; 16 bytes per thread.
template <int ES>
__global__ void dense_mask_kernel(const int64_t* __restrict__ key_start, TreeGeom g, int64_t total, uint64_t on,
                                  uint64_t off, void* __restrict__ out) {
  using W = Word<ES>;
  constexpr int kPer = 16 / ES;
  const int64_t chunks = (total + kPer - 1) / kPer;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e0 = c * kPer;
    int64_t k = e0 % g.n_k;
    int64_t rest = e0 / g.n_k;
    int64_t q = rest % g.n_q;
    int64_t b = rest / g.n_q;
    union {
      uint4 vec;
      W w[kPer];
    } v;
    v.vec = make_uint4(0, 0, 0, 0);
    int64_t ks = key_start[b];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      if (e0 + u < total) v.w[u] = static_cast<W>(visible(ks, q, k, g) ? on : off);
      if (++k == g.n_k) {
        k = 0;
        if (++q == g.n_q) {
          q = 0;
          ++b;
          if (e0 + u + 1 < total) ks = key_start[b];
        }
      }
    }
    if (e0 + kPer <= total) {
      reinterpret_cast<uint4*>(out)[c] = v.vec;
    } else {
      W* o = reinterpret_cast<W*>(out) + e0;
      for (int u = 0; e0 + u < total; ++u) o[u] = v.w[u];
    }
  }
}

__global__ void packed_mask_kernel(const int64_t* __restrict__ key_start, TreeGeom g, int64_t n_words,
                                   int64_t total, int32_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t w = i % n_words;
    const int64_t rest = i / n_words;
    const int64_t q = rest % g.n_q;
    const int64_t ks = key_start[rest / g.n_q];
    uint32_t word = 0;
    const int64_t k0 = w * 32;
    const int bits = static_cast<int>(g.n_k - k0 < 32 ? g.n_k - k0 : 32);
    for (int bit = 0; bit < bits; ++bit) word |= static_cast<uint32_t>(visible(ks, q, k0 + bit, g)) << bit;
    out[i] = static_cast<int32_t>(word);
  }
}

__global__ void position_ids_kernel(const int64_t* __restrict__ key_start, TreeGeom g, int64_t total,
                                    int64_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t q = i % g.n_q;
    const int64_t ks = key_start[i / g.n_q];
    int64_t pos;
    if (q < g.num_new) {
      pos = g.prefix_len - g.num_new + q - ks;
      pos = pos < 0 ? 0 : pos;
    } else {
      pos = g.prefix_len - ks + (q - g.num_new) % g.block_size;
    }
    out[i] = pos;
  }
}

// ------------------------------------------------------------------------------------------------ host: masks
void check_tree(const char* op, const at::Tensor& key_start, int64_t prefix_len, int64_t num_new, int64_t num_nodes,
                int64_t block_size) {
  check_dtype(op, "key_start", key_start, at::kLong);
  TORCH_CHECK_VALUE(key_start.dim() == 1, "spot.", op, ": key_start must have 1 dimensions, got shape ",
                    shape_str(key_start.sizes()));
  TORCH_CHECK_VALUE(prefix_len >= 0, "spot.", op, ": prefix_len must lie in [0, inf), got ", prefix_len);
  TORCH_CHECK_VALUE(num_new >= 0, "spot.", op, ": num_new must lie in [0, inf), got ", num_new);
  TORCH_CHECK_VALUE(num_new <= prefix_len, "spot.", op, ": num_new must be <= prefix_len (the new tokens are the ",
                    "last num_new prefix keys), got num_new=", num_new, ", prefix_len=", prefix_len);
  TORCH_CHECK_VALUE(num_nodes >= 0, "spot.", op, ": num_nodes must lie in [0, inf), got ", num_nodes);
  TORCH_CHECK_VALUE(block_size >= 1, "spot.", op, ": block_size must lie in [1, inf), got ", block_size);
  check_cuda(op, {{"key_start", &key_start}});
}

TreeGeom geometry(int64_t prefix_len, int64_t num_new, int64_t num_nodes, int64_t block_size) {
  return TreeGeom{prefix_len, num_new, block_size, num_new + num_nodes * block_size,
                  prefix_len + num_nodes * block_size};
}

at::Tensor dense_mask(const char* op, const at::Tensor& key_start_in, int64_t prefix_len, int64_t num_new,
                      int64_t num_nodes, int64_t block_size, c10::ScalarType dtype, uint64_t on, uint64_t off) {
  c10::cuda::CUDAGuard guard(key_start_in.device());
  const TreeGeom g = geometry(prefix_len, num_new, num_nodes, block_size);
  const int64_t b = key_start_in.size(0);
  at::Tensor out = at::empty({b, 1, g.n_q, g.n_k}, key_start_in.options().dtype(dtype));
  const int64_t total = out.numel();
  if (total == 0) return out;
  const at::Tensor key_start = key_start_in.contiguous();
  const int device = key_start.device().index();
  const auto stream = c10::cuda::getCurrentCUDAStream(device);
  const int threads = 256;
  const int es = static_cast<int>(out.element_size());
  const unsigned grid = grid_for(ceil_div(total, 16 / es), threads, device);
  const int64_t* ks = key_start.data_ptr<int64_t>();
  void* o = out.data_ptr();
  using Kernel = void (*)(const int64_t*, TreeGeom, int64_t, uint64_t, uint64_t, void*);
  // By element size in bytes, 1 to 8 (the mask dtypes are 1, 2, 4 or 8 bytes wide).
  const Kernel by_size[8] = {dense_mask_kernel<1>, dense_mask_kernel<2>, nullptr, dense_mask_kernel<4>,
                             nullptr,              nullptr,              nullptr, dense_mask_kernel<8>};
  const Kernel kernel = es >= 1 && es <= 8 ? by_size[es - 1] : nullptr;
  TORCH_CHECK_TYPE(kernel != nullptr, "spot.", op, " (cuda backend): unsupported element size ", es, " of dtype ",
                   dtype_name(dtype));
  SPOT_LAUNCH(kernel, grid, threads, 0, stream, ks, g, total, on, off, o);
  SPOT_LAUNCH_CHECK();
  return out;
}

at::Tensor tree_mask_cuda(const at::Tensor& key_start, int64_t prefix_len, int64_t num_new, int64_t num_nodes,
                          int64_t block_size) {
  check_tree("tree_mask", key_start, prefix_len, num_new, num_nodes, block_size);
  return dense_mask("tree_mask", key_start, prefix_len, num_new, num_nodes, block_size, at::kBool, 1, 0);
}

// The bytes of a 0-dim CPU tensor as a u64 (little endian, low bytes used).
uint64_t scalar_bits(const at::Tensor& t) {
  uint64_t bits = 0;
  std::memcpy(&bits, t.const_data_ptr(), static_cast<size_t>(t.element_size()));
  return bits;
}

at::Tensor tree_mask_additive_cuda(const at::Tensor& key_start, int64_t prefix_len, int64_t num_new,
                                   int64_t num_nodes, int64_t block_size, c10::ScalarType dtype) {
  const char* op = "tree_mask_additive";
  TORCH_CHECK_TYPE(c10::isFloatingType(dtype), "spot.", op,
                   ": dtype must be a floating torch.dtype (for 0 / -inf), got ", dtype_name(dtype));
  check_tree(op, key_start, prefix_len, num_new, num_nodes, block_size);
  const auto cpu = at::TensorOptions().dtype(dtype).device(at::kCPU);
  const uint64_t zero = scalar_bits(at::zeros({}, cpu));
  const uint64_t neg_inf = scalar_bits(at::full({}, -std::numeric_limits<double>::infinity(), cpu));
  return dense_mask(op, key_start, prefix_len, num_new, num_nodes, block_size, dtype, zero, neg_inf);
}

at::Tensor tree_mask_packed_cuda(const at::Tensor& key_start_in, int64_t prefix_len, int64_t num_new,
                                 int64_t num_nodes, int64_t block_size) {
  check_tree("tree_mask_packed", key_start_in, prefix_len, num_new, num_nodes, block_size);
  c10::cuda::CUDAGuard guard(key_start_in.device());
  const TreeGeom g = geometry(prefix_len, num_new, num_nodes, block_size);
  const int64_t n_words = ceil_div(g.n_k, 32);
  at::Tensor out = at::empty({key_start_in.size(0), g.n_q, n_words}, key_start_in.options().dtype(at::kInt));
  const int64_t total = out.numel();
  if (total == 0) return out;
  const at::Tensor key_start = key_start_in.contiguous();
  const int device = key_start.device().index();
  auto kernel = packed_mask_kernel;
  SPOT_LAUNCH(kernel, grid_for(total, 256, device), 256, 0, c10::cuda::getCurrentCUDAStream(device),
              key_start.data_ptr<int64_t>(), g, n_words, total, out.data_ptr<int32_t>());
  SPOT_LAUNCH_CHECK();
  return out;
}

at::Tensor tree_position_ids_cuda(const at::Tensor& key_start_in, int64_t prefix_len, int64_t num_new,
                                  int64_t num_nodes, int64_t block_size) {
  check_tree("tree_position_ids", key_start_in, prefix_len, num_new, num_nodes, block_size);
  c10::cuda::CUDAGuard guard(key_start_in.device());
  const TreeGeom g = geometry(prefix_len, num_new, num_nodes, block_size);
  at::Tensor out = at::empty({key_start_in.size(0), g.n_q}, key_start_in.options());
  const int64_t total = out.numel();
  if (total == 0) return out;
  const at::Tensor key_start = key_start_in.contiguous();
  const int device = key_start.device().index();
  auto kernel = position_ids_kernel;
  SPOT_LAUNCH(kernel, grid_for(total, 256, device), 256, 0, c10::cuda::getCurrentCUDAStream(device),
              key_start.data_ptr<int64_t>(), g, total, out.data_ptr<int64_t>());
  SPOT_LAUNCH_CHECK();
  return out;
}

// ------------------------------------------------------------------------------------------- fused attention
constexpr int kAttnThreads = 256;
constexpr int kThreadsPerQuery = 4;
constexpr int kQueriesPerBlock = kAttnThreads / kThreadsPerQuery;  // 64
constexpr int kKeyTile = 16;

// Element access for the attention kernel. Its templates are on the accumulation type only (float for
// float16/bfloat16/float32 inputs, double for float64): the storage kind is a uniform run-time switch, which keeps
// the number of (register-heavy, slow to compile) instantiations down.
template <typename A>
struct Io;
template <>
struct Io<float> {
  static __device__ __forceinline__ float load(const void* p, int64_t i, In kind) {
    if (kind == In::kF16) return load_as_acc<In::kF16>(static_cast<const uint16_t*>(p), i);
    if (kind == In::kBF16) return load_as_acc<In::kBF16>(static_cast<const uint16_t*>(p), i);
    return load_as_acc<In::kF32>(static_cast<const float*>(p), i);
  }
  static __device__ __forceinline__ void store(void* p, int64_t i, float v, In kind) {
    if (kind == In::kF16) {
      static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v));
    } else if (kind == In::kBF16) {
      // Round to nearest even, NaN -> 0x7FC0: torch's float -> bfloat16 conversion (c10::BFloat16).
      uint32_t u = __float_as_uint(v);
      if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        u = 0x7FC00000u;
      } else {
        u += 0x7FFFu + ((u >> 16) & 1u);
      }
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
    } else {
      static_cast<float*>(p)[i] = v;
    }
  }
};
template <>
struct Io<double> {
  static __device__ __forceinline__ double load(const void* p, int64_t i, In) {
    return load_as_acc<In::kF64>(static_cast<const double*>(p), i);
  }
  static __device__ __forceinline__ void store(void* p, int64_t i, double v, In) { static_cast<double*>(p)[i] = v; }
};

// Fold one key (score s, value row read through value(t, c)) into a query's online softmax (max m, sum l,
// accumulator acc). The accumulator is rescaled only when the running max grows, which after the first keys is
// rare.
template <typename A, int kDims, typename Value>
__device__ __forceinline__ void online_update(A s, A& m, A& l, A (&acc)[kDims], Value value) {
  if (s > m) {
    const A alpha = dexp(m - s);  // m = -inf: 0
    l *= alpha;
#pragma unroll
    for (int e = 0; e < kDims; ++e) acc[e] *= alpha;
    m = s;
  }
  const A p = dexp(s - m);
  l += p;
#pragma unroll
  for (int t = 0; t < kDims / 4; ++t) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[t * 4 + c] += p * value(t, c);
  }
}

// One query row per 4 threads: thread `sub` of the group owns dims d = 16 t + 4 sub + c (t < DV4, c < 4), so the
// four threads read 64 consecutive bytes (fp32) of a shared-memory key row, and the 8 groups of a warp read the
// same row (a broadcast). The online softmax state (max m, sum l) is replicated in the 4 threads.
template <typename A, int DV4>
__global__ void __launch_bounds__(kAttnThreads)
    tree_attention_kernel(const void* __restrict__ q, const void* __restrict__ k_prefix,
                          const void* __restrict__ v_prefix, const void* __restrict__ k_nodes,
                          const void* __restrict__ v_nodes, const int64_t* __restrict__ key_start, In kind, int64_t hq,
                          int64_t hkv, int64_t nodes, int64_t block, int64_t prefix, int64_t dim, A scale,
                          void* __restrict__ out) {
  constexpr int kDims = DV4 * 4;  // per thread
  constexpr int kPad = 16 * DV4;  // padded head dimension of the shared-memory rows
  SPOT_EXTERN_SHARED(unsigned char, smem_raw);
  A* k_tile = reinterpret_cast<A*>(smem_raw);
  A* v_tile = k_tile + kKeyTile * kPad;

  const int64_t bh = blockIdx.x;  // b * hkv + kv head
  const int64_t b = bh / hkv;
  const int64_t kvh = bh - b * hkv;
  const int64_t group = hq / hkv;
  const int64_t rows = group * nodes * block;  // query rows sharing this kv head
  const int sub = threadIdx.x % kThreadsPerQuery;
  const int64_t r = static_cast<int64_t>(blockIdx.y) * kQueriesPerBlock + threadIdx.x / kThreadsPerQuery;
  const bool active = r < rows;

  // Query row r -> (head h, node n, position i).
  const int64_t g = active ? r / (nodes * block) : 0;
  const int64_t rem = active ? r - g * nodes * block : 0;
  const int64_t n = rem / block;
  const int64_t h = kvh * group + g;
  const int64_t q_off = (((b * hq + h) * nodes + n) * block + (rem - n * block)) * dim;

  A qv[kDims], acc[kDims];
#pragma unroll
  for (int t = 0; t < DV4; ++t) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t d = 16 * t + 4 * sub + c;
      qv[t * 4 + c] = active && d < dim ? Io<A>::load(q, q_off + d, kind) : A(0);
      acc[t * 4 + c] = A(0);
    }
  }
  A m = -inf_of<A>(), l = A(0);

  // Prefix: tiles of kKeyTile keys from the row's first valid key, loaded once for the block's 64 queries.
  const int64_t ks = key_start[b];
  const int64_t kv_base = (b * hkv + kvh) * prefix * dim;
  for (int64_t k0 = ks < 0 ? 0 : ks; k0 < prefix; k0 += kKeyTile) {
    __syncthreads();  // the previous tile is consumed
    for (int e = threadIdx.x; e < kKeyTile * kPad; e += kAttnThreads) {
      const int j = e / kPad;
      const int d = e - j * kPad;
      const int64_t key = k0 + j;
      const bool ok = key < prefix && d < dim;
      k_tile[e] = ok ? Io<A>::load(k_prefix, kv_base + key * dim + d, kind) : A(0);
      v_tile[e] = ok ? Io<A>::load(v_prefix, kv_base + key * dim + d, kind) : A(0);
    }
    __syncthreads();
    const int tile = prefix - k0 < kKeyTile ? static_cast<int>(prefix - k0) : kKeyTile;
#pragma unroll 2
    for (int j = 0; j < tile; ++j) {
      const A* kr = k_tile + j * kPad + 4 * sub;
      A dot = A(0);
#pragma unroll
      for (int t = 0; t < DV4; ++t) {
#pragma unroll
        for (int c = 0; c < 4; ++c) dot += qv[t * 4 + c] * kr[16 * t + c];
      }
      dot += shfl_xor(dot, 1);
      dot += shfl_xor(dot, 2);
      const A* vr = v_tile + j * kPad + 4 * sub;
      online_update(dot * scale, m, l, acc, [&](int t, int c) { return vr[16 * t + c]; });
    }
  }

  // The node's own B keys (bidirectional), one at a time from global memory: few, shared by the node's queries.
  const int64_t node_base = ((b * hkv + kvh) * nodes + n) * block * dim;
#pragma unroll 1
  for (int64_t j = 0; j < block; ++j) {
    const int64_t row = node_base + j * dim;
    A dot = A(0);
    if (active) {
#pragma unroll
      for (int t = 0; t < DV4; ++t) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int64_t d = 16 * t + 4 * sub + c;
          if (d < dim) dot += qv[t * 4 + c] * Io<A>::load(k_nodes, row + d, kind);
        }
      }
    }
    dot += shfl_xor(dot, 1);
    dot += shfl_xor(dot, 2);
    if (!active) continue;
    online_update(dot * scale, m, l, acc, [&](int t, int c) {
      const int64_t d = 16 * t + 4 * sub + c;
      return d < dim ? Io<A>::load(v_nodes, row + d, kind) : A(0);
    });
  }

  if (!active) return;
  const A inv = A(1) / l;  // l > 0: a node always sees its own keys
#pragma unroll
  for (int t = 0; t < DV4; ++t) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t d = 16 * t + 4 * sub + c;
      if (d < dim) Io<A>::store(out, q_off + d, acc[t * 4 + c] * inv, kind);
    }
  }
}

template <typename A, int DV4>
void launch_attention(const at::Tensor& q, const at::Tensor& kp, const at::Tensor& vp, const at::Tensor& kn,
                      const at::Tensor& vn, const at::Tensor& key_start, In kind, double scale, at::Tensor& out) {
  const int64_t b = q.size(0), hq = q.size(1), nodes = q.size(2), block = q.size(3), dim = q.size(4);
  const int64_t hkv = kp.size(1), prefix = kp.size(2);
  const int64_t rows = (hq / hkv) * nodes * block;
  const size_t smem = 2 * kKeyTile * 16 * DV4 * sizeof(A);
  auto kernel = tree_attention_kernel<A, DV4>;
  const int device = q.device().index();
  if (smem > 48 * 1024) {  // fp64 with D > 128: opt in to more shared memory, once per device
    static std::atomic<bool> raised[64] = {};
    if (device < 0 || device >= 64 || !raised[device].load()) {
      C10_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      if (device >= 0 && device < 64) raised[device].store(true);
    }
  }
  const dim3 grid(static_cast<unsigned>(b * hkv), static_cast<unsigned>(ceil_div(rows, kQueriesPerBlock)));
  SPOT_LAUNCH(kernel, grid, kAttnThreads, smem, c10::cuda::getCurrentCUDAStream(device),
      q.const_data_ptr(), kp.const_data_ptr(), vp.const_data_ptr(), kn.const_data_ptr(), vn.const_data_ptr(),
      key_start.data_ptr<int64_t>(), kind, hq, hkv, nodes, block, prefix, dim, static_cast<A>(scale), out.data_ptr());
  SPOT_LAUNCH_CHECK();
}

at::Tensor tree_attention_cuda(const at::Tensor& q_in, const at::Tensor& k_prefix_in, const at::Tensor& v_prefix_in,
                               const at::Tensor& k_nodes_in, const at::Tensor& v_nodes_in,
                               const at::Tensor& key_start_in, std::optional<double> scale) {
  const char* op = "tree_attention";
  const auto dt = q_in.scalar_type();
  TORCH_CHECK_TYPE(dt == at::kHalf || dt == at::kBFloat16 || dt == at::kFloat || dt == at::kDouble, "spot.", op,
                   ": q must have dtype float16/bfloat16/float32/float64, got ", dtype_name(dt));
  TORCH_CHECK_VALUE(q_in.dim() == 5, "spot.", op, ": q must have 5 dimensions, got shape ", shape_str(q_in.sizes()));
  const int64_t b = q_in.size(0), hq = q_in.size(1), nodes = q_in.size(2), block = q_in.size(3), dim = q_in.size(4);
  TORCH_CHECK_VALUE(dim >= 1, "spot.", op, ": q must have a head dimension D >= 1, got shape ",
                    shape_str(q_in.sizes()));
  check_dtype(op, "k_prefix", k_prefix_in, dt);
  TORCH_CHECK_VALUE(k_prefix_in.dim() == 4, "spot.", op, ": k_prefix must have 4 dimensions, got shape ",
                    shape_str(k_prefix_in.sizes()));
  TORCH_CHECK_VALUE(k_prefix_in.size(0) == b && k_prefix_in.size(3) == dim, "spot.", op,
                    ": k_prefix must have shape [b, Hkv, P, D] = [", b, ", Hkv, P, ", dim, "] (b, D from q), got ",
                    shape_str(k_prefix_in.sizes()));
  const int64_t hkv = k_prefix_in.size(1), prefix = k_prefix_in.size(2);
  TORCH_CHECK_VALUE(hkv >= 1 && hq % hkv == 0, "spot.", op, ": the query heads Hq = ", hq,
                    " must be a multiple of the key/value heads Hkv = ", hkv, " >= 1 (grouped-query attention)");
  check_dtype(op, "v_prefix", v_prefix_in, dt);
  check_shape(op, "v_prefix", v_prefix_in, k_prefix_in.sizes(), "k_prefix.shape");
  check_dtype(op, "k_nodes", k_nodes_in, dt);
  check_shape(op, "k_nodes", k_nodes_in, {b, hkv, nodes, block, dim}, "[b, Hkv, N, B, D] from q and k_prefix");
  check_dtype(op, "v_nodes", v_nodes_in, dt);
  check_shape(op, "v_nodes", v_nodes_in, {b, hkv, nodes, block, dim}, "[b, Hkv, N, B, D] from q and k_prefix");
  check_dtype(op, "key_start", key_start_in, at::kLong);
  check_shape(op, "key_start", key_start_in, {b}, "[b] from q");
  if (scale.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*scale) && *scale > 0, "spot.", op,
                      ": scale must be finite and > 0 (or None for 1/sqrt(D)), got ", *scale);
  }
  TORCH_CHECK_VALUE(dim <= 256, "spot.", op, " (cuda backend): head dimension D must be <= 256, got ", dim,
                    "; use backend=\"triton\" or \"reference\"");
  check_cuda(op, {{"q", &q_in}, {"k_prefix", &k_prefix_in}, {"v_prefix", &v_prefix_in}, {"k_nodes", &k_nodes_in},
                  {"v_nodes", &v_nodes_in}, {"key_start", &key_start_in}});
  c10::cuda::CUDAGuard guard(q_in.device());

  at::Tensor out = at::empty(q_in.sizes(), q_in.options());
  const int64_t rows = (hq / hkv) * nodes * block;
  if (out.numel() == 0 || rows == 0) return out;
  TORCH_CHECK_VALUE(b * hkv < (int64_t{1} << 31) && ceil_div(rows, kQueriesPerBlock) <= 65535, "spot.", op,
                    " (cuda backend): too many rows or heads for one launch (b * Hkv = ", b * hkv,
                    ", query rows per kv head = ", rows, ")");
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(dim));
  const at::Tensor q = q_in.contiguous(), kp = k_prefix_in.contiguous(), vp = v_prefix_in.contiguous();
  const at::Tensor kn = k_nodes_in.contiguous(), vn = v_nodes_in.contiguous(), ks = key_start_in.contiguous();
  const int64_t d16 = ceil_div(dim, 16);
  if (dt == at::kDouble) {  // the float64 path is for exactness checks: two widths only
    if (d16 <= 4) {
      launch_attention<double, 4>(q, kp, vp, kn, vn, ks, In::kF64, s, out);
    } else {
      launch_attention<double, 16>(q, kp, vp, kn, vn, ks, In::kF64, s, out);
    }
  } else {
    const In kind = dt == at::kHalf ? In::kF16 : (dt == at::kBFloat16 ? In::kBF16 : In::kF32);
    if (d16 <= 2) {
      launch_attention<float, 2>(q, kp, vp, kn, vn, ks, kind, s, out);
    } else if (d16 <= 4) {
      launch_attention<float, 4>(q, kp, vp, kn, vn, ks, kind, s, out);
    } else if (d16 <= 8) {
      launch_attention<float, 8>(q, kp, vp, kn, vn, ks, kind, s, out);
    } else {
      launch_attention<float, 16>(q, kp, vp, kn, vn, ks, kind, s, out);
    }
  }
  return out;
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) {
  m.impl("_tree_mask_cuda", &spot_cuda::tree_mask_cuda);
  m.impl("_tree_mask_additive_cuda", &spot_cuda::tree_mask_additive_cuda);
  m.impl("_tree_mask_packed_cuda", &spot_cuda::tree_mask_packed_cuda);
  m.impl("_tree_position_ids_cuda", &spot_cuda::tree_position_ids_cuda);
  m.impl("_tree_attention_cuda", &spot_cuda::tree_attention_cuda);
}
