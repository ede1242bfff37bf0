// spot::_verify_tree_cuda: parallel tree verification (docs/ops.md, "Parallel verification").
//
// One thread block per batch row. Node i's edge holds when its drafted commit equals the target's commit from its
// parent's state. Acceptance (every edge up to the root holds) and depth come from pointer jumping over the parent
// pointers, ceil(log2 N) rounds with double-buffered arrays, exactly the reference's reduction; the deepest
// accepted node (ties: lowest index) is a block argmax of depth * N + (N - 1 - i). One thread then walks the
// accepted chain (its length is the accepted depth, at most N - 1) to lay out the commits in order and write them
// into the copied block. The per-row arrays live in shared memory (26 bytes per node; up to ~1800 nodes), else in
// a global workspace. No host synchronisation; the result does not depend on the launch geometry.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kBytesPerNode = 26;
constexpr int64_t kSharedLimit = 46 * 1024;

constexpr int kMaxThreads = 1024;

__global__ void __launch_bounds__(kMaxThreads)
    verify_tree_kernel(const int64_t* __restrict__ parents, const int64_t* __restrict__ draft_pos,
                       const int64_t* __restrict__ draft_tokens, const int64_t* __restrict__ target_pos,
                       const int64_t* __restrict__ target_tokens, const int64_t* __restrict__ block_in, int64_t n,
                       int64_t width, int rounds, char* __restrict__ global_ws, int64_t* __restrict__ accepted_pos,
                       int64_t* __restrict__ accepted_tokens, int64_t* __restrict__ num_accepted,
                       int64_t* __restrict__ new_block, int64_t* __restrict__ last_node) {
  SPOT_EXTERN_SHARED(char, shared_ws);
  const int64_t b = blockIdx.x;
  char* ws = global_ws != nullptr ? global_ws + b * n * kBytesPerNode : shared_ws;
  int32_t* up = reinterpret_cast<int32_t*>(ws);  // one step up (self for the root and inactive nodes)
  int32_t* ptr[2] = {up + n, up + 2 * n};         // 2^r-th ancestor
  int32_t* depth[2] = {up + 3 * n, up + 4 * n};
  int32_t* chain = up + 5 * n;
  uint8_t* ok[2] = {reinterpret_cast<uint8_t*>(up + 6 * n), reinterpret_cast<uint8_t*>(up + 6 * n) + n};

  const int64_t* par = parents + b * n;
  const int64_t* dpos = draft_pos + b * n;
  const int64_t* dtok = draft_tokens + b * n;
  const int64_t* tpos = target_pos + b * n;
  const int64_t* ttok = target_tokens + b * n;

  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t p = par[i];
    const bool has_parent = i > 0 && p >= 0 && p < n;  // p >= n cannot be followed (the reference would fail)
    const int32_t u = has_parent ? static_cast<int32_t>(p) : static_cast<int32_t>(i);
    up[i] = u;
    ptr[0][i] = u;
    depth[0][i] = has_parent;
    const bool edge = has_parent && tpos[u] >= 0 && dpos[i] == tpos[u] && dtok[i] == ttok[u];
    ok[0][i] = edge || i == 0;
  }
  __syncthreads();
  int cur = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int32_t p = ptr[cur][i];
      ok[1 - cur][i] = ok[cur][i] & ok[cur][p];
      depth[1 - cur][i] = depth[cur][i] + depth[cur][p];
      ptr[1 - cur][i] = ptr[cur][p];
    }
    __syncthreads();
    cur = 1 - cur;
  }

  // Deepest accepted node, ties lowest index (the root is always accepted, so there is one).
  int64_t best = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (ok[cur][i]) {
      const int64_t rank = static_cast<int64_t>(depth[cur][i]) * n + (n - 1 - i);
      best = rank > best ? rank : best;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const int64_t o = shfl_xor(best, off);
    best = o > best ? o : best;
  }
  __shared__ int64_t warp_best[32];
  __shared__ int64_t s_depth;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_best[warp] = best;
  // The block copies the root's block state meanwhile.
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) new_block[b * width + j] = block_in[b * width + j];
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) best = warp_best[w] > best ? warp_best[w] : best;
    const int64_t last = (n - 1) - best % n;
    int64_t d = depth[cur][last];
    d = d < 0 ? 0 : (d > n - 1 ? n - 1 : d);  // only a malformed tree (a cycle) can leave [0, n - 1]
    int64_t node = last;
    for (int64_t t = d; t >= 0; --t) {
      chain[t] = static_cast<int32_t>(node);
      node = up[node];
    }
    // Commits in chain order: the accepted edges, then the last node's own commit when it has one.
    int64_t count = 0;
    for (int64_t t = 0; t <= d; ++t) {
      const int64_t c = chain[t];
      const int64_t p = tpos[c];
      if (p >= 0) {
        ++count;
        if (p < width) new_block[b * width + p] = ttok[c];
      }
    }
    num_accepted[b] = count;
    last_node[b] = last;
    s_depth = d;
  }
  __syncthreads();
  const int64_t d = s_depth;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
    int64_t p = -1, tok = -1;
    if (t <= d) {
      const int64_t c = chain[t];
      if (tpos[c] >= 0) {
        p = tpos[c];
        tok = ttok[c];
      }
    }
    accepted_pos[b * n + t] = p;
    accepted_tokens[b * n + t] = tok;
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> verify_tree_cuda(
    const at::Tensor& parents_in, const at::Tensor& draft_pos_in, const at::Tensor& draft_tokens_in,
    const at::Tensor& target_pos_in, const at::Tensor& target_tokens_in, const at::Tensor& block_in) {
  const char* op = "verify_tree";
  check_dtype(op, "parents", parents_in, at::kLong);
  TORCH_CHECK_VALUE(parents_in.dim() == 2, "spot.", op, ": parents must have 2 dimensions, got shape ",
                    shape_str(parents_in.sizes()));
  const int64_t b = parents_in.size(0), n = parents_in.size(1);
  TORCH_CHECK_VALUE(n >= 1, "spot.", op, ": parents must have N >= 1 nodes (node 0 is the root), got shape ",
                    shape_str(parents_in.sizes()));
  TORCH_CHECK_VALUE(n < (int64_t{1} << 30), "spot.", op, " (cuda backend): N must be < 2^30, got ", n);
  const std::pair<const char*, const at::Tensor*> named[] = {{"draft_pos", &draft_pos_in},
                                                             {"draft_tokens", &draft_tokens_in},
                                                             {"target_pos", &target_pos_in},
                                                             {"target_tokens", &target_tokens_in}};
  for (const auto& [name, t] : named) {
    check_dtype(op, name, *t, at::kLong);
    check_shape(op, name, *t, {b, n}, "parents.shape");
  }
  check_dtype(op, "block", block_in, at::kLong);
  TORCH_CHECK_VALUE(block_in.dim() == 2, "spot.", op, ": block must have 2 dimensions, got shape ",
                    shape_str(block_in.sizes()));
  TORCH_CHECK_VALUE(block_in.size(0) == b, "spot.", op, ": block must have shape [b, B] with b = ", b,
                    " (from parents), got ", shape_str(block_in.sizes()));
  check_cuda(op, {{"parents", &parents_in}, {"draft_pos", &draft_pos_in}, {"draft_tokens", &draft_tokens_in},
                  {"target_pos", &target_pos_in}, {"target_tokens", &target_tokens_in}, {"block", &block_in}});
  c10::cuda::CUDAGuard guard(parents_in.device());

  const auto opts = parents_in.options();
  const int64_t width = block_in.size(1);
  at::Tensor accepted_pos = at::empty({b, n}, opts);
  at::Tensor accepted_tokens = at::empty({b, n}, opts);
  at::Tensor num_accepted = at::empty({b}, opts);
  at::Tensor new_block = at::empty({b, width}, opts);
  at::Tensor last_node = at::empty({b}, opts);
  if (b == 0) return {accepted_pos, accepted_tokens, num_accepted, new_block, last_node};

  const at::Tensor parents = parents_in.contiguous();
  const at::Tensor draft_pos = draft_pos_in.contiguous();
  const at::Tensor draft_tokens = draft_tokens_in.contiguous();
  const at::Tensor target_pos = target_pos_in.contiguous();
  const at::Tensor target_tokens = target_tokens_in.contiguous();
  const at::Tensor block = block_in.contiguous();

  int rounds = 1;  // max(1, bit_length(n - 1)), as the reference
  while ((int64_t{1} << rounds) < n) ++rounds;
  const int64_t ws_bytes = n * kBytesPerNode;
  at::Tensor global_ws;
  size_t shared_bytes = 0;
  if (ws_bytes <= kSharedLimit) {
    shared_bytes = static_cast<size_t>(ws_bytes);
  } else {
    global_ws = at::empty({b * ws_bytes}, opts.dtype(at::kByte));
  }
  const int threads =
      static_cast<int>(std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, ceil_div(n, 32) * 32)));
  const auto stream = c10::cuda::getCurrentCUDAStream(parents_in.device().index());
  auto kernel = verify_tree_kernel;
  SPOT_LAUNCH(kernel, static_cast<unsigned>(b), threads, shared_bytes, stream, parents.data_ptr<int64_t>(),
              draft_pos.data_ptr<int64_t>(), draft_tokens.data_ptr<int64_t>(), target_pos.data_ptr<int64_t>(),
              target_tokens.data_ptr<int64_t>(), block.data_ptr<int64_t>(), n, width, rounds,
              global_ws.defined() ? static_cast<char*>(global_ws.data_ptr()) : nullptr,
              accepted_pos.data_ptr<int64_t>(), accepted_tokens.data_ptr<int64_t>(), num_accepted.data_ptr<int64_t>(),
              new_block.data_ptr<int64_t>(), last_node.data_ptr<int64_t>());
  SPOT_LAUNCH_CHECK();
  return {accepted_pos, accepted_tokens, num_accepted, new_block, last_node};
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_verify_tree_cuda", &spot_cuda::verify_tree_cuda); }
