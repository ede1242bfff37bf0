// spot::_order_logits_cuda: the order drafter's whole forward for N draft nodes (docs/ops.md, "Order drafter
// forward"; the oracle is spot_kernels/reference/order_logits.py).
//
// One thread block (256 threads) per draft node, for drafters of the shipped size (d_model 128, 3 layers, 8 heads,
// d_ff 512) over blocks of up to 64 positions. The node's activations stay in one workspace through the forward: the
// residual stream x and the LayerNorm output h, [B, d_model] each, and a region of [B, 3 d_model] that holds in
// turn the input columns, the token embeddings, the qkv product, and an MLP chunk with its accumulator; plus one
// softmax row per warp and a staged weight tile. The workspace is the block's dynamic shared memory where it fits
// the device's opt-in limit (the shipped drafter: about 100 KB at B = 32, two blocks per H100 SM; 183 KB at B = 64),
// else a slice of a global buffer (same code, L2-resident). Weights are read from global memory (2.4 MB for the
// shipped drafter, L2-resident, shared by every block).
//
// Every linear is block_gemm below: float32 FMAs on the CUDA cores (no TF32), a 4 x 4 register tile per thread over
// 32 x 128 output tiles (B <= 32) or 64 x 64 (larger B), the weight tile staged in shared memory by coalesced rows.
// Per layer: LayerNorm (a warp per row); the qkv product; attention a warp per (query row, head): the bidirectional
// softmax over the block and P V into that head's columns of h (free once qkv is computed); the output projection
// added to x; LayerNorm; the exact-GELU MLP in d_ff chunks of 128, the second product accumulated over chunks. Then
// the final LayerNorm and the head. The operations and their order are the reference's, so the logits differ from
// it only by the order of float32 sums (within the tolerance tests/ops/test_order_logits.py holds every kernel to).
// One launch, no host synchronisation.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileK = 32;            // one warp loads one weight row's 32 consecutive floats
constexpr int kTileLd = 4 * 32 + 1;   // the weight tile's row: up to 128 columns, +1 so that stores hit distinct banks
constexpr int kChunk = 128;           // d_ff columns of the MLP per step
constexpr float kEps = 1e-5f;         // nn.LayerNorm's default

// Sizes, weight offsets (floats into the packed weights, weight_layout's order) and workspace layout of one call.
struct Plan {
  int block, n_stale, n_in, d, heads, hd, d_ff, token_dim, max_block, max_depth, n_layers;
  int64_t rows;
  int64_t off_pos, off_rel, off_depth, off_tok, off_layers, layer_size;
  int64_t res_row, res_depth, res_pos, res_depths;  // resampled's strides (res_depth 0 for [R, B]) and D
  bool has_tokens, has_resampled;
  float attn_scale, out_scale;
  // workspace (floats): x, h [block, ld]; the region [block, ld_qkv] (or the input columns [block, ld_in], the
  // tokens [block, ld_tok], an MLP chunk [block, ld_chunk] then its accumulator [block, ld]); softmax rows; tile
  int ld, ld_in, ld_tok, ld_qkv, ld_chunk;
  int64_t at_h, at_region, at_acc, at_probs, at_tile, floats;
};

// Offsets inside one layer of the packed weights.
struct LayerAt {
  int64_t norm1, qkv_w, qkv_b, out_w, out_b, norm2, ff1_w, ff1_b, ff2_w, ff2_b;
};

__host__ __device__ inline LayerAt layer_at(int64_t base, int64_t d, int64_t d_ff) {
  LayerAt l;
  l.norm1 = base;  // weight, then bias
  l.qkv_w = base + 2 * d;
  l.qkv_b = l.qkv_w + 3 * d * d;
  l.out_w = l.qkv_b + 3 * d;
  l.out_b = l.out_w + d * d;
  l.norm2 = l.out_b + d;
  l.ff1_w = l.norm2 + 2 * d;
  l.ff1_b = l.ff1_w + d_ff * d;
  l.ff2_w = l.ff1_b + d_ff;
  l.ff2_b = l.ff2_w + d * d_ff;
  return l;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += shfl_xor(v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = shfl_xor(v, off);
    v = o > v ? o : v;
  }
  return v;
}

// out[i, n] = epilogue(i, n, sum_k A[i, k] W[n, k]) for i < M, n < N, over tiles of 4 kRows x 4 (256 / kRows):
// thread (ty, tx) = (t / cols, t % cols) owns rows ty + kRows r and columns tx + cols c, r, c < 4. A: [M, K] in the
// workspace, row stride lda; W's row n: K contiguous floats at w_row(n), in global memory. Called by every thread of
// the block (the loops are uniform); starts and ends with a barrier, so A may be written just before and the
// outputs read just after.
template <int kRows, typename WRow, typename Epilogue>
__device__ void block_gemm(const float* A, int lda, int M, int K, int N, const WRow& w_row, float* w_tile,
                           const Epilogue& epilogue) {
  constexpr int kCols = kThreads / kRows, kTileM = 4 * kRows, kTileN = 4 * kCols;
  static_assert(kTileN < kTileLd, "the weight tile's rows hold kTileN columns");
  const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols;
  for (int m0 = 0; m0 < M; m0 += kTileM) {
    for (int n0 = 0; n0 < N; n0 += kTileN) {
      float acc[4][4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;
      }
      for (int k0 = 0; k0 < K; k0 += kTileK) {
        __syncthreads();  // the previous tile is read, A is written
        for (int e = threadIdx.x; e < kTileN * kTileK; e += kThreads) {
          const int n = e / kTileK, k = e - n * kTileK;
          w_tile[k * kTileLd + n] = (n0 + n < N && k0 + k < K) ? __ldg(w_row(n0 + n) + k0 + k) : 0.0f;
        }
        __syncthreads();
        const int kk = K - k0 < kTileK ? K - k0 : kTileK;
        for (int k = 0; k < kk; ++k) {
          float a[4], w[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int i = m0 + ty + kRows * r;
            a[r] = i < M ? A[i * lda + k0 + k] : 0.0f;
          }
#pragma unroll
          for (int c = 0; c < 4; ++c) w[c] = w_tile[k * kTileLd + tx + kCols * c];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[r][c] += a[r] * w[c];
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int i = m0 + ty + kRows * r, n = n0 + tx + kCols * c;
          if (i < M && n < N) epilogue(i, n, acc[r][c]);
        }
      }
    }
  }
  __syncthreads();
}

// block_gemm with the tile shape for M rows: 32 x 128 for up to 32 rows (a block of 32 positions fills it), else
// 64 x 64.
template <typename WRow, typename Epilogue>
__device__ void linear(const float* A, int lda, int M, int K, int N, const WRow& w_row, float* w_tile,
                       const Epilogue& epilogue) {
  if (M <= 32) {
    block_gemm<8>(A, lda, M, K, N, w_row, w_tile, epilogue);
  } else {
    block_gemm<16>(A, lda, M, K, N, w_row, w_tile, epilogue);
  }
}

// y = LayerNorm(x) over d columns (weight at w, bias at w + d), a warp per row; ends with a barrier.
__device__ void layer_norm_rows(const float* x, float* y, int rows, int d, int ld, const float* w) {
  const int lane = threadIdx.x & 31;
  for (int i = threadIdx.x >> 5; i < rows; i += kWarps) {
    const float* xi = x + i * ld;
    float s = 0.0f;
    for (int c = lane; c < d; c += 32) s += xi[c];
    const float mean = warp_sum(s) / static_cast<float>(d);
    float v = 0.0f;
    for (int c = lane; c < d; c += 32) {
      const float dx = xi[c] - mean;
      v += dx * dx;
    }
    const float rstd = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(d) + kEps);
    for (int c = lane; c < d; c += 32) y[i * ld + c] = (xi[c] - mean) * rstd * __ldg(w + c) + __ldg(w + d + c);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    order_logits_kernel(const float* __restrict__ features, const bool* __restrict__ stale_masked,
                        const float* __restrict__ tokens, const int64_t* __restrict__ node_row,
                        const bool* __restrict__ node_masked, const int64_t* __restrict__ depth,
                        const float* __restrict__ resampled, const float* __restrict__ weights, Plan p,
                        float* __restrict__ global_ws, float* __restrict__ out) {
  SPOT_EXTERN_SHARED(float, shared_ws);
  const int64_t node = blockIdx.x;
  float* ws = global_ws != nullptr ? global_ws + node * p.floats : shared_ws;
  float* x = ws;
  float* h = ws + p.at_h;
  float* region = ws + p.at_region;
  float* acc_ff = ws + p.at_acc;  // the MLP's second product, beside its chunk in the region
  float* w_tile = ws + p.at_tile;
  const int B = p.block, D = p.d, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool* masked = node_masked + node * B;
  // Clamped: the router checks node_row and depth; a direct call of the private op stays memory-safe.
  int64_t row = node_row[node];
  row = row < 0 ? 0 : (row >= p.rows ? p.rows - 1 : row);
  const int64_t node_depth = depth[node];
  const int64_t emb_depth = node_depth < 0 ? 0 : (node_depth >= p.max_depth ? p.max_depth - 1 : node_depth);

  // The node's masked count and leftmost masked position (B when none), computed by every warp alike.
  int count = 0, first = B;
  for (int j = lane; j < B; j += 32) {
    if (masked[j]) {
      ++count;
      first = j < first ? j : first;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    count += shfl_xor(count, off);
    const int o = shfl_xor(first, off);
    first = o < first ? o : first;
  }
  const float frac = static_cast<float>(count) / static_cast<float>(B);

  // The input columns (reference.node_columns): the row's stale features, masked now, committed along the path,
  // fraction masked, then the clamped resampled value and its log / 14.
  const float* feat = features + row * B * p.n_stale;
  const bool* stale_m = stale_masked + row * B;
  const float* res = nullptr;
  if (p.has_resampled) {
    int64_t d = p.res_depth != 0 ? node_depth : 0;
    d = d < 0 ? 0 : (d >= p.res_depths ? p.res_depths - 1 : d);
    res = resampled + row * p.res_row + d * p.res_depth;
  }
  for (int e = threadIdx.x; e < B * p.n_in; e += kThreads) {
    const int i = e / p.n_in, col = e - i * p.n_in;
    float v;
    if (col < p.n_stale) {
      v = feat[i * p.n_stale + col];
    } else if (col == p.n_stale) {
      v = masked[i] ? 1.0f : 0.0f;
    } else if (col == p.n_stale + 1) {
      v = stale_m[i] && !masked[i] ? 1.0f : 0.0f;
    } else if (col == p.n_stale + 2) {
      v = frac;
    } else {
      float r = res[i * p.res_pos];
      r = r != r ? 0.0f : (r < 0.0f ? 0.0f : (r > 1.0f ? 1.0f : r));  // nan_to_num(0).clamp(0, 1)
      v = col == p.n_stale + 3 ? r : logf(r > 1e-6f ? r : 1e-6f) / 14.0f;
    }
    region[i * p.ld_in + col] = v;
  }

  // x = inp(columns) + pos + rel + depth (+ tok_proj(tokens)), summed in the reference's order
  const float* w_all = weights;
  linear(region, p.ld_in, B, p.n_in, D, [=](int n) { return w_all + static_cast<int64_t>(n) * p.n_in; }, w_tile,
         [=](int i, int n, float acc) {
           int rel = i - first;
           rel = (rel < -p.max_block ? -p.max_block : (rel > p.max_block - 1 ? p.max_block - 1 : rel)) + p.max_block;
           const float lin = acc + __ldg(w_all + static_cast<int64_t>(D) * p.n_in + n);
           x[i * p.ld + n] = lin + __ldg(w_all + p.off_pos + static_cast<int64_t>(i) * D + n) +
                             __ldg(w_all + p.off_rel + static_cast<int64_t>(rel) * D + n) +
                             __ldg(w_all + p.off_depth + emb_depth * D + n);
         });
  if (p.has_tokens) {
    const float* tok = tokens + row * B * p.token_dim;
    for (int e = threadIdx.x; e < B * p.token_dim; e += kThreads) {
      const int i = e / p.token_dim, c = e - i * p.token_dim;
      region[i * p.ld_tok + c] = tok[i * p.token_dim + c];
    }
    linear(region, p.ld_tok, B, p.token_dim, D,
           [=](int n) { return w_all + p.off_tok + static_cast<int64_t>(n) * p.token_dim; }, w_tile,
           [=](int i, int n, float acc) { x[i * p.ld + n] += acc; });
  }

  float* probs = ws + p.at_probs + warp * B;  // this warp's softmax row
  for (int layer = 0; layer < p.n_layers; ++layer) {
    const LayerAt l = layer_at(p.off_layers + layer * p.layer_size, D, p.d_ff);
    layer_norm_rows(x, h, B, D, p.ld, w_all + l.norm1);
    linear(h, p.ld, B, D, 3 * D, [=](int n) { return w_all + l.qkv_w + static_cast<int64_t>(n) * D; }, w_tile,
           [=](int i, int n, float acc) { region[i * p.ld_qkv + n] = acc + __ldg(w_all + l.qkv_b + n); });
    // A warp per (query row, head), bidirectional over the block: its output goes into h, read by nothing else now.
    for (int pair = warp; pair < B * p.heads; pair += kWarps) {
      const int i = pair / p.heads, head = pair - i * p.heads;
      const float* q = region + i * p.ld_qkv + head * p.hd;
      float m = -inf_of<float>();
      for (int j = lane; j < B; j += 32) {
        const float* k = region + j * p.ld_qkv + D + head * p.hd;
        float s = 0.0f;
        for (int e = 0; e < p.hd; ++e) s += q[e] * k[e];
        s *= p.attn_scale;
        probs[j] = s;
        m = s > m ? s : m;
      }
      m = warp_max(m);
      float sum = 0.0f;
      for (int j = lane; j < B; j += 32) {
        const float e = expf(probs[j] - m);
        probs[j] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      for (int j = lane; j < B; j += 32) probs[j] = probs[j] / sum;
      __syncwarp();
      for (int e = lane; e < p.hd; e += 32) {
        const float* v = region + 2 * D + head * p.hd + e;
        float o = 0.0f;
        for (int j = 0; j < B; ++j) o += probs[j] * v[j * p.ld_qkv];
        h[i * p.ld + head * p.hd + e] = o;
      }
      __syncwarp();  // the row is read before the next one is written
    }
    linear(h, p.ld, B, D, D, [=](int n) { return w_all + l.out_w + static_cast<int64_t>(n) * D; }, w_tile,
           [=](int i, int n, float acc) { x[i * p.ld + n] += acc + __ldg(w_all + l.out_b + n); });
    layer_norm_rows(x, h, B, D, p.ld, w_all + l.norm2);
    for (int f0 = 0; f0 < p.d_ff; f0 += kChunk) {
      const int width = p.d_ff - f0 < kChunk ? p.d_ff - f0 : kChunk;
      linear(h, p.ld, B, D, width, [=](int n) { return w_all + l.ff1_w + static_cast<int64_t>(f0 + n) * D; }, w_tile,
             [=](int i, int n, float acc) {
               const float u = acc + __ldg(w_all + l.ff1_b + f0 + n);
               region[i * p.ld_chunk + n] = u * 0.5f * (1.0f + erff(u * 0.70710678118654752f));  // exact GELU
             });
      linear(region, p.ld_chunk, B, width, D,
             [=](int n) { return w_all + l.ff2_w + static_cast<int64_t>(n) * p.d_ff + f0; }, w_tile,
             [=](int i, int n, float acc) { acc_ff[i * p.ld + n] = f0 == 0 ? acc : acc_ff[i * p.ld + n] + acc; });
    }
    for (int e = threadIdx.x; e < B * D; e += kThreads) {
      const int i = e / D, n = e - i * D;
      x[i * p.ld + n] += acc_ff[i * p.ld + n] + __ldg(w_all + l.ff2_b + n);
    }
    __syncthreads();
  }

  const int64_t final_at = p.off_layers + p.n_layers * p.layer_size;
  layer_norm_rows(x, h, B, D, p.ld, w_all + final_at);
  const float* head_w = w_all + final_at + 2 * D;
  const float head_b = __ldg(head_w + D);
  for (int i = warp; i < B; i += kWarps) {
    float s = 0.0f;
    for (int c = lane; c < D; c += 32) s += h[i * p.ld + c] * __ldg(head_w + c);
    s = warp_sum(s);
    if (lane == 0) out[node * B + i] = masked[i] ? (s + head_b) * p.out_scale : -inf_of<float>();
  }
}

// The opt-in shared memory per block of a device (cudaDeviceGetAttribute is not a stream operation: capture-safe).
int shared_optin(int device) {
  static std::atomic<int> cache[64] = {};
  if (device < 0 || device >= 64) return 48 * 1024;
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      n = 48 * 1024;
    }
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

at::Tensor order_logits_cuda(const at::Tensor& features_in, const at::Tensor& stale_masked_in,
                             const std::optional<at::Tensor>& tokens_in, const at::Tensor& node_row_in,
                             const at::Tensor& node_masked_in, const at::Tensor& depth_in,
                             const std::optional<at::Tensor>& resampled_in, const at::Tensor& weights, int64_t d_model,
                             int64_t n_layers, int64_t n_heads, int64_t d_ff, int64_t max_block, int64_t max_depth,
                             double scale) {
  const char* op = "order_logits";
  check_dtype(op, "features", features_in, at::kFloat);
  TORCH_CHECK_VALUE(features_in.dim() == 3, "spot.", op, ": features must have 3 dimensions, got shape ",
                    shape_str(features_in.sizes()));
  const int64_t rows = features_in.size(0), block = features_in.size(1), n_stale = features_in.size(2);
  check_dtype(op, "stale_masked", stale_masked_in, at::kBool);
  check_shape(op, "stale_masked", stale_masked_in, {rows, block}, "[R, B] from features");
  int64_t token_dim = 0;
  if (tokens_in.has_value()) {
    check_dtype(op, "tokens", *tokens_in, at::kFloat);
    TORCH_CHECK_VALUE(tokens_in->dim() == 3, "spot.", op, ": tokens must have 3 dimensions, got shape ",
                      shape_str(tokens_in->sizes()));
    token_dim = tokens_in->size(2);
    check_shape(op, "tokens", *tokens_in, {rows, block, token_dim}, "[R, B, token_dim] from features");
    TORCH_CHECK_VALUE(token_dim >= 1, "spot.", op, ": tokens must have token_dim >= 1, got shape ",
                      shape_str(tokens_in->sizes()));
  }
  check_dtype(op, "node_row", node_row_in, at::kLong);
  TORCH_CHECK_VALUE(node_row_in.dim() == 1, "spot.", op, ": node_row must have 1 dimensions, got shape ",
                    shape_str(node_row_in.sizes()));
  const int64_t n = node_row_in.size(0);
  check_dtype(op, "node_masked", node_masked_in, at::kBool);
  check_shape(op, "node_masked", node_masked_in, {n, block}, "[N, B] from node_row and features");
  check_dtype(op, "depth", depth_in, at::kLong);
  check_shape(op, "depth", depth_in, {n}, "[N] from node_row");
  int64_t res_depths = 1;
  if (resampled_in.has_value()) {
    check_dtype(op, "resampled", *resampled_in, at::kFloat);
    if (resampled_in->dim() == 3) {
      res_depths = resampled_in->size(1);
      check_shape(op, "resampled", *resampled_in, {rows, res_depths, block}, "[R, D, B] (R, B from features)");
    } else {
      check_shape(op, "resampled", *resampled_in, {rows, block}, "[R, B] or [R, D, B] (R, B from features)");
    }
  }
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"d_model", d_model}, {"n_layers", n_layers},
                                {"n_heads", n_heads}, {"d_ff", d_ff}, {"max_block", max_block},
                                {"max_depth", max_depth}}) {
    TORCH_CHECK_VALUE(v >= 1, "spot.", op, ": ", name, " must lie in [1, inf), got ", v);
  }
  TORCH_CHECK_VALUE(d_model % n_heads == 0, "spot.", op, ": n_heads (", n_heads, ") must divide d_model (", d_model,
                    ")");
  TORCH_CHECK_VALUE(block <= max_block, "spot.", op, ": the block size B = ", block,
                    " (features.shape[1]) exceeds max_block ", max_block);
  TORCH_CHECK_VALUE(std::isfinite(scale) && scale > 0, "spot.", op, ": scale must be a finite float > 0, got ", scale);
  check_dtype(op, "weights", weights, at::kFloat);
  TORCH_CHECK_VALUE(weights.dim() == 1, "spot.", op, ": weights must have 1 dimensions, got shape ",
                    shape_str(weights.sizes()));
  // weight_layout's sizes (spot_kernels/ops/order_logits.py), in its order
  const int64_t d = d_model, n_in = n_stale + 3 + (resampled_in.has_value() ? 2 : 0);
  const int64_t off_pos = d * n_in + d, off_rel = off_pos + max_block * d, off_depth = off_rel + 2 * max_block * d;
  const int64_t off_tok = off_depth + max_depth * d, off_layers = off_tok + d * token_dim;
  const int64_t layer_size = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + d_ff * d + d_ff + d * d_ff + d;
  const int64_t expected = off_layers + n_layers * layer_size + 2 * d + d + 1;
  TORCH_CHECK_VALUE(weights.size(0) == expected, "spot.", op, ": weights must hold ", expected,
                    " float32 values (weight_layout with ", n_in, " input columns, d_model ", d_model, ", n_layers ",
                    n_layers, ", d_ff ", d_ff, ", max_block ", max_block, ", max_depth ", max_depth, ", token_dim ",
                    token_dim, "), got ", weights.size(0));
  TORCH_CHECK_VALUE(weights.is_contiguous(), "spot.", op, ": weights must be contiguous (one packed tensor)");
  TORCH_CHECK_VALUE(n == 0 || rows >= 1, "spot.", op, ": node_row must lie in [0, 0) (a row of features), got ", n,
                    " nodes");
  for (const int64_t size : {block, n_in, d_model, d_ff, token_dim, max_block, max_depth, n_layers}) {
    TORCH_CHECK_VALUE(size < (int64_t{1} << 24), "spot.", op, " (cuda backend): every size must be < 2^24, got ",
                      size);
  }
  check_cuda(op, {{"features", &features_in}, {"stale_masked", &stale_masked_in}, {"node_row", &node_row_in},
                  {"node_masked", &node_masked_in}, {"depth", &depth_in}, {"weights", &weights}});
  if (tokens_in.has_value()) check_cuda(op, {{"features", &features_in}, {"tokens", &*tokens_in}});
  if (resampled_in.has_value()) check_cuda(op, {{"features", &features_in}, {"resampled", &*resampled_in}});
  c10::cuda::CUDAGuard guard(features_in.device());

  at::Tensor out = at::empty({n, block}, features_in.options());
  if (n == 0 || block == 0) return out;

  const at::Tensor features = features_in.contiguous();
  const at::Tensor stale_masked = stale_masked_in.contiguous();
  const at::Tensor node_row = node_row_in.contiguous();
  const at::Tensor node_masked = node_masked_in.contiguous();
  const at::Tensor depth = depth_in.contiguous();
  const at::Tensor tokens = tokens_in.has_value() ? tokens_in->contiguous() : at::Tensor();

  Plan p{};
  p.block = static_cast<int>(block);
  p.n_stale = static_cast<int>(n_stale);
  p.n_in = static_cast<int>(n_in);
  p.d = static_cast<int>(d);
  p.heads = static_cast<int>(n_heads);
  p.hd = static_cast<int>(d / n_heads);
  p.d_ff = static_cast<int>(d_ff);
  p.token_dim = static_cast<int>(token_dim);
  p.max_block = static_cast<int>(max_block);
  p.max_depth = static_cast<int>(max_depth);
  p.n_layers = static_cast<int>(n_layers);
  p.rows = rows;
  p.off_pos = off_pos;
  p.off_rel = off_rel;
  p.off_depth = off_depth;
  p.off_tok = off_tok;
  p.off_layers = off_layers;
  p.layer_size = layer_size;
  p.has_tokens = tokens_in.has_value();
  p.has_resampled = resampled_in.has_value();
  if (p.has_resampled) {  // read through its strides: expanded views cost nothing
    const bool per_depth = resampled_in->dim() == 3;
    p.res_row = resampled_in->stride(0);
    p.res_depth = per_depth ? resampled_in->stride(1) : 0;
    p.res_pos = resampled_in->stride(per_depth ? 2 : 1);
    p.res_depths = res_depths;
  }
  p.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.hd)));
  p.out_scale = static_cast<float>(scale);
  // Workspace: odd row strides, so that a warp reading a column of rows hits distinct banks.
  p.ld = p.d + 1;
  p.ld_in = p.n_in + 1;
  p.ld_tok = p.token_dim + 1;
  p.ld_qkv = 3 * p.d + 1;
  p.ld_chunk = kChunk + 1;
  const int64_t chunk = block * p.ld_chunk;  // an MLP chunk; its sums follow it
  const int64_t region = std::max({block * p.ld_in, block * p.ld_tok, block * p.ld_qkv, chunk + block * p.ld});
  p.at_h = block * p.ld;
  p.at_region = 2 * block * p.ld;
  p.at_acc = p.at_region + chunk;
  p.at_probs = p.at_region + region;
  p.at_tile = p.at_probs + static_cast<int64_t>(kWarps) * block;
  p.floats = p.at_tile + kTileK * kTileLd;
  p.floats = (p.floats + 3) / 4 * 4;  // 16-byte aligned slices of the global workspace
  TORCH_CHECK_VALUE(p.floats < (int64_t{1} << 31), "spot.", op, " (cuda backend): B = ", block, " positions x d_model ",
                    d_model, " need ", p.floats, " floats of workspace per node, more than 2^31");

  const int device = features_in.device().index();
  const int64_t bytes = p.floats * static_cast<int64_t>(sizeof(float));
  const int optin = shared_optin(device);
  auto kernel = order_logits_kernel;
  at::Tensor global_ws;
  size_t shared_bytes = 0;
  if (bytes <= optin) {
    shared_bytes = static_cast<size_t>(bytes);
    if (bytes > 48 * 1024) {  // opt in to the device's limit, once per device
      static std::atomic<bool> raised[64] = {};
      if (device < 0 || device >= 64 || !raised[device].load()) {
        // (the kernel has no static shared memory: the whole opt-in limit is dynamic)
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
        if (device >= 0 && device < 64) raised[device].store(true);
      }
    }
  } else {
    global_ws = at::empty({n * p.floats}, features_in.options());
  }
  const auto stream = c10::cuda::getCurrentCUDAStream(device);
  SPOT_LAUNCH(kernel, static_cast<unsigned>(n), kThreads, shared_bytes, stream, features.data_ptr<float>(),
              stale_masked.data_ptr<bool>(), p.has_tokens ? tokens.data_ptr<float>() : nullptr,
              node_row.data_ptr<int64_t>(), node_masked.data_ptr<bool>(), depth.data_ptr<int64_t>(),
              p.has_resampled ? resampled_in->data_ptr<float>() : nullptr, weights.data_ptr<float>(), p,
              global_ws.defined() ? global_ws.data_ptr<float>() : nullptr, out.data_ptr<float>());
  SPOT_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_order_logits_cuda", &spot_cuda::order_logits_cuda); }
