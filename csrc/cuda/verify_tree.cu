// spot::_verify_tree_cuda and spot::_verify_steps_cuda: parallel tree verification, one commit or one rule step per
// node (docs/ops.md, "Parallel verification").
//
// One thread block per batch row. Node i's edge holds when its drafted transition is the target's own from its
// parent's state (verify_tree: the drafted commit is the parent's target commit; verify_steps: the node's state is
// the parent's successor at every position, a warp per node comparing the B positions). Acceptance (every edge up to
// the root holds) and depth come from pointer jumping over the parent pointers, ceil(log2 N) rounds with
// double-buffered arrays, exactly the reference's reduction; the deepest accepted node (ties: lowest index) is a
// block argmax of depth * N + (N - 1 - i). One thread then walks the accepted chain (its length is the accepted
// depth, at most N - 1). verify_tree lays out the commits in order and writes them into the copied block;
// verify_steps finds, per position, the first step of the chain committing it and ranks the committed positions by
// (step, position) by counting (O(B^2) per row). The per-row arrays live in shared memory (26 bytes per node, and 4
// per position for verify_steps), else in a global workspace. No host synchronisation; the result does not depend on
// the launch geometry.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kBytesPerNode = 26;
constexpr int kBytesPerPosition = 4;  // verify_steps: the first step committing each position
constexpr int64_t kSharedLimit = 46 * 1024;

constexpr int kMaxThreads = 1024;

// A row's workspace: seven int32 arrays (six of N, then `extra` of the caller's length), then two byte arrays of N.
// The pointer-jumping arrays come in pairs (read one, write the other) under fixed names, not indexed by a round's
// parity: a dynamically indexed pointer array would live in local memory.
struct TreeWs {
  int32_t* up;  // one step up (self for the root and inactive nodes)
  int32_t *ptr, *ptr2;  // 2^r-th ancestor
  int32_t *depth, *depth2;
  int32_t* chain;
  int32_t* extra;
  uint8_t *ok, *ok2;
};

__host__ __device__ __forceinline__ int64_t ws_bytes(int64_t n, int64_t extra) {
  const int64_t bytes = n * kBytesPerNode + extra * kBytesPerPosition;
  return (bytes + 7) / 8 * 8;  // rows of a global workspace stay aligned
}

__device__ __forceinline__ TreeWs tree_ws(char* ws, int64_t n, int64_t extra) {
  int32_t* up = reinterpret_cast<int32_t*>(ws);
  uint8_t* bytes = reinterpret_cast<uint8_t*>(up + 6 * n + extra);
  return TreeWs{up, up + n, up + 2 * n, up + 3 * n, up + 4 * n, up + 5 * n, up + 6 * n, bytes, bytes + n};
}

// Each node's acceptance (every edge up to the root holds) and depth.
struct Reach {
  const uint8_t* ok;
  const int32_t* depth;
};

template <typename T>
__device__ __forceinline__ void swap_buffers(T*& a, T*& b) {
  T* c = a;
  a = b;
  b = c;
}

// Pointer jumping from ptr = up, depth = has_parent and ok = the node's own edge, `rounds` rounds. Ends with a
// barrier.
__device__ __forceinline__ Reach jump(const TreeWs& t, int64_t n, int rounds) {
  int32_t *ptr = t.ptr, *ptr2 = t.ptr2, *depth = t.depth, *depth2 = t.depth2;
  uint8_t *ok = t.ok, *ok2 = t.ok2;
  for (int r = 0; r < rounds; ++r) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int32_t p = ptr[i];
      ok2[i] = ok[i] & ok[p];
      depth2[i] = depth[i] + depth[p];
      ptr2[i] = ptr[p];
    }
    __syncthreads();
    swap_buffers(ptr, ptr2);
    swap_buffers(depth, depth2);
    swap_buffers(ok, ok2);
  }
  return Reach{ok, depth};
}

// The deepest accepted node, ties lowest index (the root is always accepted, so there is one), for every thread.
__device__ __forceinline__ int64_t deepest_accepted(const Reach& reach, int64_t n) {
  int64_t best = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (reach.ok[i]) {
      const int64_t rank = static_cast<int64_t>(reach.depth[i]) * n + (n - 1 - i);
      best = rank > best ? rank : best;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const int64_t o = shfl_xor(best, off);
    best = o > best ? o : best;
  }
  __shared__ int64_t warp_best[32];
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
  __syncthreads();
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) best = warp_best[w] > best ? warp_best[w] : best;
  return (n - 1) - best % n;
}

// The depth of the chain's last node, clamped: only a malformed tree (a cycle) can leave [0, n - 1].
__device__ __forceinline__ int64_t chain_depth(const Reach& reach, int64_t last, int64_t n) {
  const int64_t d = reach.depth[last];
  return d < 0 ? 0 : (d > n - 1 ? n - 1 : d);
}

// chain[t] = the ancestor of `last` at depth t, for t <= d (one thread).
__device__ __forceinline__ void walk_chain(const TreeWs& t, int64_t last, int64_t d) {
  int64_t node = last;
  for (int64_t k = d; k >= 0; --k) {
    t.chain[k] = static_cast<int32_t>(node);
    node = t.up[node];
  }
}

__global__ void __launch_bounds__(kMaxThreads)
    verify_tree_kernel(const int64_t* __restrict__ parents, const int64_t* __restrict__ draft_pos,
                       const int64_t* __restrict__ draft_tokens, const int64_t* __restrict__ target_pos,
                       const int64_t* __restrict__ target_tokens, const int64_t* __restrict__ block_in, int64_t n,
                       int64_t width, int rounds, char* __restrict__ global_ws, int64_t* __restrict__ accepted_pos,
                       int64_t* __restrict__ accepted_tokens, int64_t* __restrict__ num_accepted,
                       int64_t* __restrict__ new_block, int64_t* __restrict__ last_node) {
  SPOT_EXTERN_SHARED(char, shared_ws);
  const int64_t b = blockIdx.x;
  const TreeWs t = tree_ws(global_ws != nullptr ? global_ws + b * ws_bytes(n, 0) : shared_ws, n, 0);

  const int64_t* par = parents + b * n;
  const int64_t* dpos = draft_pos + b * n;
  const int64_t* dtok = draft_tokens + b * n;
  const int64_t* tpos = target_pos + b * n;
  const int64_t* ttok = target_tokens + b * n;

  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t p = par[i];
    const bool has_parent = i > 0 && p >= 0 && p < n;  // p >= n cannot be followed (the reference would fail)
    const int32_t u = has_parent ? static_cast<int32_t>(p) : static_cast<int32_t>(i);
    t.up[i] = u;
    t.ptr[i] = u;
    t.depth[i] = has_parent;
    const bool edge = has_parent && tpos[u] >= 0 && dpos[i] == tpos[u] && dtok[i] == ttok[u];
    t.ok[i] = edge || i == 0;
  }
  // The block copies the root's block state meanwhile (the barriers below order it before the commits).
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) new_block[b * width + j] = block_in[b * width + j];
  __syncthreads();
  const Reach reach = jump(t, n, rounds);
  const int64_t last = deepest_accepted(reach, n);
  const int64_t d = chain_depth(reach, last, n);
  if (threadIdx.x == 0) {
    walk_chain(t, last, d);
    // Commits in chain order: the accepted edges, then the last node's own commit when it has one.
    int64_t count = 0;
    for (int64_t k = 0; k <= d; ++k) {
      const int64_t c = t.chain[k];
      const int64_t p = tpos[c];
      if (p >= 0) {
        ++count;
        if (p < width) new_block[b * width + p] = ttok[c];
      }
    }
    num_accepted[b] = count;
    last_node[b] = last;
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    int64_t p = -1, tok = -1;
    if (k <= d) {
      const int64_t c = t.chain[k];
      if (tpos[c] >= 0) {
        p = tpos[c];
        tok = ttok[c];
      }
    }
    accepted_pos[b * n + k] = p;
    accepted_tokens[b * n + k] = tok;
  }
}

__global__ void __launch_bounds__(kMaxThreads)
    verify_steps_kernel(const int64_t* __restrict__ parents, const int64_t* __restrict__ states,
                        const bool* __restrict__ commit, const int64_t* __restrict__ tokens, int64_t n, int64_t width,
                        int rounds, char* __restrict__ global_ws, int64_t* __restrict__ accepted_pos,
                        int64_t* __restrict__ num_accepted, int64_t* __restrict__ num_steps,
                        int64_t* __restrict__ new_block, int64_t* __restrict__ last_node) {
  SPOT_EXTERN_SHARED(char, shared_ws);
  const int64_t b = blockIdx.x;
  const TreeWs t = tree_ws(global_ws != nullptr ? global_ws + b * ws_bytes(n, width) : shared_ws, n, width);
  int32_t* step_of = t.extra;  // the chain's first step committing each position, -1 for none

  const int64_t* par = parents + b * n;
  const int64_t* st = states + b * n * width;  // node i's slice: + i * width
  const bool* cm = commit + b * n * width;
  const int64_t* tk = tokens + b * n * width;

  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t p = par[i];
    const bool has_parent = i > 0 && p >= 0 && p < n;
    const int32_t u = has_parent ? static_cast<int32_t>(p) : static_cast<int32_t>(i);
    t.up[i] = u;
    t.ptr[i] = u;
    t.depth[i] = has_parent;
    t.ok[i] = has_parent || i == 0;  // for now; a child's edge is decided below
  }
  __syncthreads();
  // Edge parent -> i: node i's state is the parent's successor at every position (a warp per node).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t i = warp; i < n; i += warps) {
    const int64_t p = t.up[i];
    if (p == i) continue;  // the root or an inactive node (the whole warp)
    int same = 1;
    for (int64_t j = lane; j < width; j += 32) {
      const int64_t successor = cm[p * width + j] ? tk[p * width + j] : st[p * width + j];
      same &= st[i * width + j] == successor;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) same &= shfl_xor(same, off);
    if (lane == 0) t.ok[i] = same;
  }
  __syncthreads();
  const Reach reach = jump(t, n, rounds);
  const int64_t last = deepest_accepted(reach, n);
  const int64_t d = chain_depth(reach, last, n);
  if (threadIdx.x == 0) {
    walk_chain(t, last, d);
    num_steps[b] = d + 1;
    last_node[b] = last;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    int32_t s = -1;
    for (int64_t k = 0; k <= d && s < 0; ++k) {
      if (cm[static_cast<int64_t>(t.chain[k]) * width + j]) s = static_cast<int32_t>(k);
    }
    step_of[j] = s;
    const int64_t o = last * width + j;
    new_block[b * width + j] = cm[o] ? tk[o] : st[o];
  }
  __syncthreads();
  // Positions in commit order, by (step, position): each committed position's slot is the number before it.
  int64_t count = 0;
  for (int64_t k = 0; k < width; ++k) count += step_of[k] >= 0;
  if (threadIdx.x == 0) num_accepted[b] = count;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const int32_t s = step_of[j];
    if (s >= 0) {
      int64_t slot = 0;
      for (int64_t k = 0; k < width; ++k) {
        const int32_t sk = step_of[k];
        slot += sk >= 0 && (sk < s || (sk == s && k < j));
      }
      accepted_pos[b * width + slot] = j;
    }
    if (j >= count) accepted_pos[b * width + j] = -1;
  }
}

// The per-row workspace: dynamic shared memory when it fits, else a global buffer.
struct Workspace {
  at::Tensor global;
  size_t shared_bytes = 0;
  char* global_ptr() const { return global.defined() ? static_cast<char*>(global.data_ptr()) : nullptr; }
};

Workspace workspace(int64_t b, int64_t n, int64_t extra, const at::TensorOptions& opts) {
  Workspace ws;
  const int64_t bytes = ws_bytes(n, extra);
  if (bytes <= kSharedLimit) {
    ws.shared_bytes = static_cast<size_t>(bytes);
  } else {
    ws.global = at::empty({b * bytes}, opts.dtype(at::kByte));
  }
  return ws;
}

int jump_rounds(int64_t n) {  // max(1, bit_length(n - 1)), as the reference
  int rounds = 1;
  while ((int64_t{1} << rounds) < n) ++rounds;
  return rounds;
}

int row_threads(int64_t items) {
  return static_cast<int>(std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, ceil_div(items, 32) * 32)));
}

// parents: int64 [b, N] with 1 <= N < 2^30 (the kernels index nodes with int32); returns {b, N}.
std::pair<int64_t, int64_t> check_parents(const char* op, const at::Tensor& parents) {
  check_dtype(op, "parents", parents, at::kLong);
  TORCH_CHECK_VALUE(parents.dim() == 2, "spot.", op, ": parents must have 2 dimensions, got shape ",
                    shape_str(parents.sizes()));
  const int64_t n = parents.size(1);
  TORCH_CHECK_VALUE(n >= 1, "spot.", op, ": parents must have N >= 1 nodes (node 0 is the root), got shape ",
                    shape_str(parents.sizes()));
  TORCH_CHECK_VALUE(n < (int64_t{1} << 30), "spot.", op, " (cuda backend): N must be < 2^30, got ", n);
  return {parents.size(0), n};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> verify_tree_cuda(
    const at::Tensor& parents_in, const at::Tensor& draft_pos_in, const at::Tensor& draft_tokens_in,
    const at::Tensor& target_pos_in, const at::Tensor& target_tokens_in, const at::Tensor& block_in) {
  const char* op = "verify_tree";
  const auto [b, n] = check_parents(op, parents_in);
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

  const Workspace ws = workspace(b, n, 0, opts);
  const auto stream = c10::cuda::getCurrentCUDAStream(parents_in.device().index());
  auto kernel = verify_tree_kernel;
  SPOT_LAUNCH(kernel, static_cast<unsigned>(b), row_threads(n), ws.shared_bytes, stream, parents.data_ptr<int64_t>(),
              draft_pos.data_ptr<int64_t>(), draft_tokens.data_ptr<int64_t>(), target_pos.data_ptr<int64_t>(),
              target_tokens.data_ptr<int64_t>(), block.data_ptr<int64_t>(), n, width, jump_rounds(n),
              ws.global_ptr(), accepted_pos.data_ptr<int64_t>(), accepted_tokens.data_ptr<int64_t>(),
              num_accepted.data_ptr<int64_t>(), new_block.data_ptr<int64_t>(), last_node.data_ptr<int64_t>());
  SPOT_LAUNCH_CHECK();
  return {accepted_pos, accepted_tokens, num_accepted, new_block, last_node};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> verify_steps_cuda(
    const at::Tensor& parents_in, const at::Tensor& states_in, const at::Tensor& commit_in,
    const at::Tensor& tokens_in) {
  const char* op = "verify_steps";
  const auto [b, n] = check_parents(op, parents_in);
  check_dtype(op, "states", states_in, at::kLong);
  TORCH_CHECK_VALUE(states_in.dim() == 3 && states_in.size(0) == b && states_in.size(1) == n, "spot.", op,
                    ": states must have shape [b, N, B] with [b, N] = ", shape_str(parents_in.sizes()),
                    " (from parents), got ", shape_str(states_in.sizes()));
  check_dtype(op, "commit", commit_in, at::kBool);
  check_shape(op, "commit", commit_in, states_in.sizes(), "states.shape");
  check_dtype(op, "tokens", tokens_in, at::kLong);
  check_shape(op, "tokens", tokens_in, states_in.sizes(), "states.shape");
  check_cuda(op, {{"parents", &parents_in}, {"states", &states_in}, {"commit", &commit_in}, {"tokens", &tokens_in}});
  c10::cuda::CUDAGuard guard(parents_in.device());

  const auto opts = parents_in.options();
  const int64_t width = states_in.size(2);
  TORCH_CHECK_VALUE(width < (int64_t{1} << 30), "spot.", op, " (cuda backend): B must be < 2^30, got ", width);
  at::Tensor accepted_pos = at::empty({b, width}, opts);
  at::Tensor num_accepted = at::empty({b}, opts);
  at::Tensor num_steps = at::empty({b}, opts);
  at::Tensor new_block = at::empty({b, width}, opts);
  at::Tensor last_node = at::empty({b}, opts);
  if (b == 0) return {accepted_pos, num_accepted, num_steps, new_block, last_node};

  const at::Tensor parents = parents_in.contiguous();
  const at::Tensor states = states_in.contiguous();
  const at::Tensor commit = commit_in.contiguous();
  const at::Tensor tokens = tokens_in.contiguous();
  const Workspace ws = workspace(b, n, width, opts);
  const auto stream = c10::cuda::getCurrentCUDAStream(parents_in.device().index());
  auto kernel = verify_steps_kernel;
  // at least 4 warps: the edge test runs a warp per node
  SPOT_LAUNCH(kernel, static_cast<unsigned>(b), row_threads(std::max<int64_t>({n, width, 128})), ws.shared_bytes,
              stream, parents.data_ptr<int64_t>(), states.data_ptr<int64_t>(), commit.data_ptr<bool>(),
              tokens.data_ptr<int64_t>(), n, width, jump_rounds(n), ws.global_ptr(), accepted_pos.data_ptr<int64_t>(),
              num_accepted.data_ptr<int64_t>(), num_steps.data_ptr<int64_t>(), new_block.data_ptr<int64_t>(),
              last_node.data_ptr<int64_t>());
  SPOT_LAUNCH_CHECK();
  return {accepted_pos, num_accepted, num_steps, new_block, last_node};
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) {
  m.impl("_verify_tree_cuda", &spot_cuda::verify_tree_cuda);
  m.impl("_verify_steps_cuda", &spot_cuda::verify_steps_cuda);
}
