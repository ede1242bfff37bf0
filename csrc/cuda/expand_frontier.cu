// spot::_expand_frontier_cuda and spot::_expand_steps_cuda: one depth of a static draft tree, one commit or one
// whole rule step per child (docs/ops.md, "Frontier expansion"; the oracle is
// spot_kernels/reference/expand_frontier.py).
//
// expand_frontier: one thread block per row, as the Triton kernel's one program per row. Its warps take the row's w
// frontier nodes in turn and run select_children's per-node code on each (select_children.cuh's node_children, the code
// of spot::_select_children_cuda), writing the row's n = w * branch children straight into the outputs. After a block
// barrier (global writes of a block are visible to the block after __syncthreads) each thread takes children c: its
// effective log-probability (-inf where the child has no token) and its rank in the row, the number of children before
// it in a stable descending sort (O(n) per child, n is a tree's width times its branching); a child of rank r < W is
// the next frontier's slot r. A second barrier, then the -inf written back, each child's state (its frontier node's,
// with the token clamped to >= 0 at its position) and the kept children's states, all by the whole block over [n, B].
// One launch, no host synchronisation, outputs independent of the launch geometry.
//
// expand_steps: one thread block per row too. The block draws the row's token at every position once
// (select_children.cuh's position_token: every node of the row draws the same), then its warps take the row's
// frontier nodes: ranks of the eligible positions by counting, the Plackett-Luce prefixes by one lane (sequential in
// double, the CPU kernel's and the reference's arithmetic, so near-ties order the same), the 8 (B + 1) candidates a
// lane each, the `branch` best by counting ranks among them, and the children's states; then the row's next
// frontier as expand_frontier's. The per-node arrays live in a global scratch buffer. One launch, no host
// synchronisation, outputs independent of the launch geometry.

#include "select_children.cuh"

namespace spot_cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

template <typename P, typename Q>
__global__ void __launch_bounds__(kThreads)
    expand_frontier_kernel(const P* __restrict__ position_logits, const int64_t* __restrict__ states,
                           const P* __restrict__ path_logprob, StaleTopK<Q> stale_rows, uint32_t skey,
                           const int64_t* __restrict__ rows, const int64_t* __restrict__ block_start,
                           const int64_t* __restrict__ steps, bool tempered, int64_t mask_id, int64_t w, int64_t block,
                           int64_t branch, int64_t kept,
                           int64_t* __restrict__ child_pos, P* __restrict__ child_logprob,
                           int64_t* __restrict__ child_tokens, int64_t* __restrict__ child_states,
                           int64_t* __restrict__ frontier, int64_t* __restrict__ frontier_states,
                           P* __restrict__ frontier_logprob) {
  const int64_t r = blockIdx.x;
  const int64_t n = w * branch;
  const StaleTopK<Q> stale = stale_rows.at(r);
  // Warp-uniform loop: every lane of a warp takes the same nodes, so node_children's shuffles stay full-warp.
  for (int64_t s = threadIdx.x >> 5; s < w; s += kWarps) {
    const int64_t f = r * w + s;
    const int64_t* state = states + f * block;
    const auto is_masked = [state, mask_id](int64_t j) { return state[j] == mask_id; };
    const int64_t out = r * n + s * branch;
    node_children(position_logits + f * block, is_masked, block, path_logprob[f], stale, skey, rows[r],
                  block_start[r], steps[r], tempered, branch, child_pos + out, child_logprob + out,
                  child_tokens + out);
  }
  __syncthreads();

  const int64_t* pos = child_pos + r * n;
  const int64_t* tok = child_tokens + r * n;
  P* lp = child_logprob + r * n;
  const auto effective = [lp, tok](int64_t c) { return tok[c] < 0 ? -inf_of<P>() : lp[c]; };  // no token: no child
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const P x = effective(c);
    int64_t rank = 0;
    for (int64_t o = 0; o < n && rank < kept; ++o) {
      const P y = effective(o);
      rank += y > x || (y == x && o < c);
    }
    if (rank < kept) {
      frontier[r * kept + rank] = c;
      frontier_logprob[r * kept + rank] = x;
    }
  }
  __syncthreads();  // every rank is counted from the log-probabilities select_children wrote

  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) lp[c] = effective(c);
  for (int64_t e = threadIdx.x; e < n * block; e += blockDim.x) {
    const int64_t c = e / block, j = e - c * block;
    const int64_t t = tok[c];
    child_states[r * n * block + e] = pos[c] == j ? (t > 0 ? t : 0) : states[(r * w + c / branch) * block + j];
  }
  __syncthreads();  // the children's states are read back for the next frontier's
  for (int64_t e = threadIdx.x; e < kept * block; e += blockDim.x) {
    const int64_t slot = e / block, j = e - slot * block;
    frontier_states[(r * kept + slot) * block + j] = child_states[(r * n + frontier[r * kept + slot]) * block + j];
  }
}

// The host checks expand_frontier and expand_steps share, in the router's order; size_logprob [F, B + 1] of the
// logits' dtype is expand_steps' only (nullptr for expand_frontier).
struct FrontierArgs {
  c10::ScalarType pdt, qdt;
  int64_t frontier, block, b, w;
};

FrontierArgs check_frontier_args(const char* op, const at::Tensor& position_logits, const at::Tensor& states,
                                 const at::Tensor& path_logprob, const at::Tensor* size_logprob,
                                 const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids, int64_t seed,
                                 const at::Tensor& rows, const at::Tensor& block_start, const at::Tensor& steps,
                                 double temperature, int64_t branch, int64_t width) {
  const auto pdt = check_frontier_logits(op, position_logits, path_logprob);
  const int64_t frontier_nodes = position_logits.size(0), block = position_logits.size(1);
  check_dtype(op, "rows", rows, at::kLong);
  TORCH_CHECK_VALUE(rows.dim() == 1, "spot.", op, ": rows must have 1 dimensions, got shape ", shape_str(rows.sizes()));
  const int64_t b = rows.size(0);
  TORCH_CHECK_VALUE(b > 0 ? frontier_nodes % b == 0 : frontier_nodes == 0, "spot.", op,
                    ": position_logits must hold w frontier nodes per row, F = b * w with b = ", b,
                    " (rows.shape[0]), got F = ", frontier_nodes);
  check_dtype(op, "states", states, at::kLong);
  check_shape(op, "states", states, {frontier_nodes, block}, "position_logits.shape");
  if (size_logprob != nullptr) {
    check_dtype(op, "size_logprob", *size_logprob, pdt);
    check_shape(op, "size_logprob", *size_logprob, {frontier_nodes, block + 1}, "[F, B + 1] from position_logits");
  }
  const auto qdt = check_stale_topk(op, stale_topk_probs, stale_topk_ids, b, block, "[b, B, K]",
                                    "b from rows, B from position_logits");
  check_dtype(op, "block_start", block_start, at::kLong);
  check_shape(op, "block_start", block_start, {b}, "[b] from rows");
  check_dtype(op, "steps", steps, at::kLong);
  check_shape(op, "steps", steps, {b}, "[b] from rows");
  check_seed(op, seed);
  check_temperature(op, temperature);
  TORCH_CHECK_VALUE(branch >= 1 && branch <= 65536, "spot.", op, ": branch must lie in [1, 65537), got ", branch);
  TORCH_CHECK_VALUE(width >= 1, "spot.", op, ": width must lie in [1, inf), got ", width);
  return {pdt, qdt, frontier_nodes, block, b, b > 0 ? frontier_nodes / b : 0};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> expand_frontier_cuda(
    const at::Tensor& position_logits_in, const at::Tensor& states_in, const at::Tensor& path_logprob_in,
    const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, int64_t mask_id, int64_t branch,
    int64_t width) {
  const char* op = "expand_frontier";
  const FrontierArgs args = check_frontier_args(op, position_logits_in, states_in, path_logprob_in, nullptr,
                                                stale_topk_probs, stale_topk_ids, seed, rows_in, block_start_in,
                                                steps_in, temperature, branch, width);
  const auto pdt = args.pdt, qdt = args.qdt;
  const int64_t block = args.block, b = args.b, w = args.w;
  check_cuda(op, {{"position_logits", &position_logits_in}, {"states", &states_in}, {"path_logprob", &path_logprob_in},
                  {"stale_topk_probs", &stale_topk_probs}, {"stale_topk_ids", &stale_topk_ids}, {"rows", &rows_in},
                  {"block_start", &block_start_in}, {"steps", &steps_in}});
  c10::cuda::CUDAGuard guard(position_logits_in.device());

  const int64_t n = w * branch, kept = std::min(width, n);
  const auto opts = states_in.options();
  at::Tensor child_pos = at::empty({b, n}, opts);
  at::Tensor child_logprob = at::empty({b, n}, position_logits_in.options());
  at::Tensor child_tokens = at::empty({b, n}, opts);
  at::Tensor child_states = at::empty({b, n, block}, opts);
  at::Tensor frontier = at::empty({b, kept}, opts);
  at::Tensor frontier_states = at::empty({b * kept, block}, opts);
  at::Tensor frontier_logprob = at::empty({b * kept}, position_logits_in.options());
  if (b == 0 || w == 0) {
    return {child_pos, child_logprob, child_tokens, child_states, frontier, frontier_states, frontier_logprob};
  }

  const at::Tensor logits = position_logits_in.contiguous();
  const at::Tensor states = states_in.contiguous();
  const at::Tensor path = path_logprob_in.contiguous();
  const at::Tensor rows = rows_in.contiguous();
  const at::Tensor block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream(position_logits_in.device().index());

  with_children_dtypes(pdt, qdt, [&](auto p_type, auto q_type) {
    using P = decltype(p_type);
    using Q = decltype(q_type);
    auto kernel = expand_frontier_kernel<P, Q>;
    SPOT_LAUNCH(kernel, static_cast<unsigned>(b), kThreads, 0, stream, logits.data_ptr<P>(),
                states.data_ptr<int64_t>(), path.data_ptr<P>(), stale_topk<Q>(stale_topk_probs, stale_topk_ids),
                seed_key(seed), rows.data_ptr<int64_t>(),
                block_start.data_ptr<int64_t>(), steps.data_ptr<int64_t>(), temperature > 0, mask_id, w, block,
                branch, kept, child_pos.data_ptr<int64_t>(), child_logprob.data_ptr<P>(),
                child_tokens.data_ptr<int64_t>(), child_states.data_ptr<int64_t>(), frontier.data_ptr<int64_t>(),
                frontier_states.data_ptr<int64_t>(), frontier_logprob.data_ptr<P>());
  });
  SPOT_LAUNCH_CHECK();
  return {child_pos, child_logprob, child_tokens, child_states, frontier, frontier_states, frontier_logprob};
}


// ------------------------------------------------------------------------------------------------ expand_steps

// The candidate sets of a step of m positions, by rank: (rank out, rank in) relative to m, (0, 0) the first m ranks
// (spot_kernels/reference/expand_frontier.py, STEP_VARIANTS). Candidate c is size c / 8, variant c % 8.
constexpr int kVariants = 8;
__device__ __forceinline__ int rank_out(int v) { return v == 0 ? 0 : (v < 6 ? -1 : -2); }
__device__ __forceinline__ int rank_in(int v) { return v == 0 ? 0 : (v < 6 ? v - 1 : v - 6); }

// torch's descending stable sort: NaN before every number, then larger values, ties to the lower index.
template <typename P>
__device__ __forceinline__ bool sorts_before(P a, int64_t ia, P b, int64_t ib) {
  const bool na = a != a, nb = b != b;
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// torch's log-add-exp of logcumsumexp's scan (ATen's _log_add_exp_helper), in double, as the CPU kernel.
__device__ __forceinline__ double log_add_exp(double x, double y) {
  const double lo = y < x ? y : x, hi = x < y ? y : x;  // std::min / std::max
  const bool finite = lo > -inf_of<double>() && lo < inf_of<double>();
  return (lo != hi || finite) ? log1p(exp(lo - hi)) + hi : x;
}

// Global scratch of one call, [F, ...] per frontier node unless said otherwise (b x B tokens; sized on the host).
template <typename P>
struct StepsScratch {
  int64_t* tokens;  // [b, B]: the token at each position of a row (the same for every node of the row)
  P* lv;            // [F, B]: the node's logits by rank
  P* prefix;        // [F, B + 1]: Plackett-Luce log-probability of the first m ranks
  P* cand;          // [F, 8 (B + 1)]: each candidate's path log-probability
  int32_t* rank;    // [F, B]: each position's rank, -1 if not eligible
  int32_t* order;   // [F, B]: the position of each rank
  int32_t* missing;  // [F, B + 1]: how many of the first m ranks have no token
  int32_t* pick;    // [F, branch]: each child's candidate, -1 for padding
};

template <typename P, typename Q>
struct StepsArgs {
  const P *logits, *path, *sizes;
  const int64_t *states, *rows, *block_start, *steps;
  StaleTopK<Q> stale;
  uint32_t skey;
  bool tempered;
  int64_t mask_id, w, block, branch, kept;
  P *child_logprob, *frontier_logprob;
  int64_t *child_states, *frontier, *frontier_states;
  StepsScratch<P> ws;
};

// One frontier node's children, by one whole warp (every lane, the same f): the CPU kernel's arithmetic (StepsRow in
// csrc/cpu/expand_frontier.cpp), so log-probabilities and their ties come out the same.
template <typename P, typename Q>
__device__ void node_steps(const StepsArgs<P, Q>& a, int64_t r, int64_t f) {
  const int lane = threadIdx.x & 31;
  const int64_t B = a.block, C = (B + 1) * kVariants;
  const P big = std::numeric_limits<P>::max() / 4;  // +inf logits: the largest that log-sum-exp keeps finite
  const P* lg = a.logits + f * B;
  const int64_t* state = a.states + f * B;
  const int64_t* tok = a.ws.tokens + r * B;
  P* lv = a.ws.lv + f * B;
  P* prefix = a.ws.prefix + f * (B + 1);
  P* cand = a.ws.cand + f * C;
  int32_t* rank_of = a.ws.rank + f * B;
  int32_t* order = a.ws.order + f * B;
  int32_t* missing = a.ws.missing + f * (B + 1);
  int32_t* pick = a.ws.pick + f * a.branch;
  const auto key = [&](int64_t j, bool& eligible) {
    P x = lg[j];
    x = x != x ? -inf_of<P>() : (big < x ? big : x);  // NaN: -inf; +inf: big
    eligible = state[j] == a.mask_id && x > -inf_of<P>();
    return x;
  };

  // eligible positions ranked by (logit desc, position asc), by counting
  int n_e = 0;
  for (int64_t j = lane; j < B; j += 32) {
    bool e;
    const P x = key(j, e);
    int32_t rk = -1;
    if (e) {
      rk = 0;
      for (int64_t i = 0; i < B; ++i) {
        bool ei;
        const P xi = key(i, ei);
        rk += ei && (xi > x || (xi == x && i < j));
      }
      order[rk] = static_cast<int32_t>(j);
      lv[rk] = x;
      ++n_e;
    }
    rank_of[j] = rk;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) n_e += shfl_xor(n_e, off);
  __syncwarp();

  // Plackett-Luce prefixes and missing tokens, sequential in double as the reference's logcumsumexp and cumsum
  if (lane == 0) {
    double suffix = -inf_of<double>();
    for (int64_t k = n_e - 1; k >= 0; --k) {
      suffix = log_add_exp(static_cast<double>(lv[k]), suffix);
      prefix[k + 1] = lv[k] - static_cast<P>(suffix);  // the step's term, summed below
    }
    double acc = 0;
    prefix[0] = P(0);
    missing[0] = 0;
    for (int64_t k = 0; k < B; ++k) {
      acc += k < n_e ? static_cast<double>(prefix[k + 1]) : 0.0;
      prefix[k + 1] = static_cast<P>(acc);
      missing[k + 1] = missing[k] + (k < n_e && tok[order[k]] < 0);
    }
  }
  __syncwarp();

  // every candidate's log-probability; -inf unless its ranks exist, all with a token, and its size is possible
  const P path = a.path[f];
  const P* size = a.sizes + f * (B + 1);
  int live = 0;  // candidates not -inf (NaN included): the only ones that can be children
  for (int64_t c = lane; c < C; c += 32) {
    const int64_t m = c / kVariants;
    const int v = static_cast<int>(c % kVariants);
    P lp = -inf_of<P>();
    bool ok = size[m] > -inf_of<P>();
    if (v == 0) {
      ok = ok && m <= n_e && missing[m] == 0;
      if (ok) lp = prefix[m];
    } else {  // rank m + out swapped for rank m + in: the prefix's log-probability plus their logit gap
      const int64_t r_out = m + rank_out(v), r_in = m + rank_in(v);
      ok = ok && r_out >= 0 && r_in < n_e &&
           missing[m] - (missing[r_out + 1] - missing[r_out]) + (missing[r_in + 1] - missing[r_in]) == 0;
      if (ok) lp = prefix[m] + (lv[r_in] - lv[r_out]);  // the gap first, as the reference
    }
    const P x = ok ? (path + size[m]) + lp : -inf_of<P>();
    cand[c] = x;
    live += x != -inf_of<P>();
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) live += shfl_xor(live, off);
  __syncwarp();

  // the `branch` best (a stable descending sort, NaN first) by counting; the slots after them are padding
  const int64_t kept = live < a.branch ? live : a.branch;
  P* child_lp = a.child_logprob + f * a.branch;
  for (int64_t c = lane; c < C; c += 32) {
    const P x = cand[c];
    if (x == -inf_of<P>()) continue;
    int64_t rk = 0;
    for (int64_t o = 0; o < C && rk < kept; ++o) rk += sorts_before(cand[o], o, x, c);
    if (rk < kept) {
      pick[rk] = static_cast<int32_t>(c);
      child_lp[rk] = x;
    }
  }
  for (int64_t s = kept + lane; s < a.branch; s += 32) {
    pick[s] = -1;
    child_lp[s] = -inf_of<P>();
  }
  __syncwarp();

  // the children: the node's state with the set's tokens written in (padding, -inf or NaN: the node's state)
  for (int64_t s = 0; s < a.branch; ++s) {
    const int64_t c = pick[s];
    const bool set = c >= 0 && child_lp[s] > -inf_of<P>();
    const int64_t m = set ? c / kVariants : 0;
    const int v = static_cast<int>(c % kVariants);
    const int64_t r_out = set && v > 0 ? m + rank_out(v) : -1, r_in = set && v > 0 ? m + rank_in(v) : -1;
    int64_t* out = a.child_states + (f * a.branch + s) * B;
    for (int64_t j = lane; j < B; j += 32) {
      const int64_t k = rank_of[j];
      const bool in = k >= 0 && ((k < m && k != r_out) || k == r_in);
      out[j] = in ? (tok[j] > 0 ? tok[j] : 0) : state[j];
    }
  }
}

// One thread block per row: the row's tokens (every position once, by the whole block), its frontier nodes a warp
// each (node_steps), then each child's rank in the row by counting; a child of rank < W is the next frontier's.
template <typename P, typename Q>
__global__ void __launch_bounds__(kThreads) expand_steps_kernel(const StepsArgs<P, Q> a) {
  const int64_t r = blockIdx.x, B = a.block;
  const StaleTopK<Q> stale = a.stale.at(r);
  int64_t* tok = a.ws.tokens + r * B;
  for (int64_t j = threadIdx.x; j < B; j += blockDim.x) {
    tok[j] = position_token(stale, j, a.tempered, a.skey, a.rows[r], a.block_start[r] + j, a.steps[r]);
  }
  __syncthreads();  // every node of the row reads the tokens
  // Warp-uniform loop: every lane of a warp takes the same nodes, so node_steps' shuffles stay full-warp.
  for (int64_t s = threadIdx.x >> 5; s < a.w; s += kWarps) node_steps(a, r, r * a.w + s);
  __syncthreads();  // the children's log-probabilities and states, read below

  const int64_t n = a.w * a.branch;
  const P* lp = a.child_logprob + r * n;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const P x = lp[c];
    int64_t rank = 0;
    for (int64_t o = 0; o < n && rank < a.kept; ++o) rank += sorts_before(lp[o], o, x, c);
    if (rank < a.kept) {
      a.frontier[r * a.kept + rank] = c;
      a.frontier_logprob[r * a.kept + rank] = x;
    }
  }
  __syncthreads();  // the kept children's indices
  for (int64_t e = threadIdx.x; e < a.kept * B; e += blockDim.x) {
    const int64_t slot = e / B, j = e - slot * B;
    a.frontier_states[(r * a.kept + slot) * B + j] = a.child_states[(r * n + a.frontier[r * a.kept + slot]) * B + j];
  }
}

// 16-byte aligned slices of one byte buffer.
struct Carve {
  char* base;
  int64_t used = 0;
  template <typename T>
  T* take(int64_t count) {
    T* p = base == nullptr ? nullptr : reinterpret_cast<T*>(base + used);
    used += (count * static_cast<int64_t>(sizeof(T)) + 15) / 16 * 16;
    return p;
  }
};

template <typename P>
StepsScratch<P> carve_scratch(Carve& c, int64_t b, int64_t frontier, int64_t block, int64_t branch) {
  StepsScratch<P> ws;
  ws.tokens = c.take<int64_t>(b * block);
  ws.lv = c.take<P>(frontier * block);
  ws.prefix = c.take<P>(frontier * (block + 1));
  ws.cand = c.take<P>(frontier * (block + 1) * kVariants);
  ws.rank = c.take<int32_t>(frontier * block);
  ws.order = c.take<int32_t>(frontier * block);
  ws.missing = c.take<int32_t>(frontier * (block + 1));
  ws.pick = c.take<int32_t>(frontier * branch);
  return ws;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> expand_steps_cuda(
    const at::Tensor& position_logits_in, const at::Tensor& states_in, const at::Tensor& path_logprob_in,
    const at::Tensor& size_logprob_in, const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids,
    int64_t seed, const at::Tensor& rows_in, const at::Tensor& block_start_in, const at::Tensor& steps_in,
    double temperature, int64_t mask_id, int64_t branch, int64_t width) {
  const char* op = "expand_steps";
  const FrontierArgs args = check_frontier_args(op, position_logits_in, states_in, path_logprob_in, &size_logprob_in,
                                                stale_topk_probs, stale_topk_ids, seed, rows_in, block_start_in,
                                                steps_in, temperature, branch, width);
  const auto pdt = args.pdt, qdt = args.qdt;
  const int64_t frontier_nodes = args.frontier, block = args.block, b = args.b, w = args.w;
  // the scratch holds ranks and candidate indices as int32
  TORCH_CHECK_VALUE(block < (int64_t{1} << 27), "spot.", op, ": B must lie in [0, 2^27), got ", block);
  check_cuda(op, {{"position_logits", &position_logits_in}, {"states", &states_in}, {"path_logprob", &path_logprob_in},
                  {"size_logprob", &size_logprob_in}, {"stale_topk_probs", &stale_topk_probs},
                  {"stale_topk_ids", &stale_topk_ids}, {"rows", &rows_in}, {"block_start", &block_start_in},
                  {"steps", &steps_in}});
  c10::cuda::CUDAGuard guard(position_logits_in.device());

  const int64_t n = w * branch, kept = std::min(width, n);
  const auto longs = states_in.options();
  const auto floats = position_logits_in.options();
  at::Tensor child_logprob = at::empty({b, n}, floats);
  at::Tensor child_states = at::empty({b, n, block}, longs);
  at::Tensor frontier = at::empty({b, kept}, longs);
  at::Tensor frontier_states = at::empty({b * kept, block}, longs);  // flat, as the next call takes it
  at::Tensor frontier_logprob = at::empty({b * kept}, floats);
  if (frontier_nodes == 0) return {child_logprob, child_states, frontier, frontier_states, frontier_logprob};

  const at::Tensor logits = position_logits_in.contiguous();
  const at::Tensor states = states_in.contiguous();
  const at::Tensor path = path_logprob_in.contiguous();
  const at::Tensor sizes = size_logprob_in.contiguous();
  const at::Tensor rows = rows_in.contiguous();
  const at::Tensor block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream(position_logits_in.device().index());

  with_children_dtypes(pdt, qdt, [&](auto p_type, auto q_type) {
    using P = decltype(p_type);
    using Q = decltype(q_type);
    Carve sizing{nullptr};
    carve_scratch<P>(sizing, b, frontier_nodes, block, branch);
    const at::Tensor scratch = at::empty({sizing.used}, longs.dtype(at::kByte));
    Carve carve{static_cast<char*>(scratch.data_ptr())};
    const StepsArgs<P, Q> args{logits.data_ptr<P>(), path.data_ptr<P>(), sizes.data_ptr<P>(),
                               states.data_ptr<int64_t>(), rows.data_ptr<int64_t>(),
                               block_start.data_ptr<int64_t>(), steps.data_ptr<int64_t>(),
                               stale_topk<Q>(stale_topk_probs, stale_topk_ids), seed_key(seed), temperature > 0,
                               mask_id, w, block, branch, kept, child_logprob.data_ptr<P>(),
                               frontier_logprob.data_ptr<P>(), child_states.data_ptr<int64_t>(),
                               frontier.data_ptr<int64_t>(), frontier_states.data_ptr<int64_t>(),
                               carve_scratch<P>(carve, b, frontier_nodes, block, branch)};
    auto kernel = expand_steps_kernel<P, Q>;
    SPOT_LAUNCH(kernel, static_cast<unsigned>(b), kThreads, 0, stream, args);
  });
  SPOT_LAUNCH_CHECK();
  return {child_logprob, child_states, frontier, frontier_states, frontier_logprob};
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) {
  m.impl("_expand_frontier_cuda", &spot_cuda::expand_frontier_cuda);
  m.impl("_expand_steps_cuda", &spot_cuda::expand_steps_cuda);
}
