// spot::_expand_frontier_cuda: one depth of a static draft tree (docs/ops.md, "Frontier expansion"; the oracle is
// spot_kernels/reference/expand_frontier.py).
//
// One thread block per row, as the Triton kernel's one program per row. Its warps take the row's w frontier nodes in
// turn and run select_children's per-node code on each (select_children.cuh's node_children, the code of
// spot::_select_children_cuda), writing the row's n = w * branch children straight into the outputs. After a block
// barrier (global writes of a block are visible to the block after __syncthreads) each thread takes children c:
// its effective log-probability (-inf where the child has no token) and its rank in the row, the number of children
// before it in a stable descending sort (O(n) per child, n is a tree's width times its branching); a child of rank
// r < W is the next frontier's slot r. A second barrier, then the -inf written back, each child's state (its frontier
// node's, with the token clamped to >= 0 at its position) and the kept children's states, all by the whole block
// over [n, B]. One launch, no host synchronisation, outputs independent of the launch geometry.

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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> expand_frontier_cuda(
    const at::Tensor& position_logits_in, const at::Tensor& states_in, const at::Tensor& path_logprob_in,
    const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, int64_t mask_id, int64_t branch,
    int64_t width) {
  const char* op = "expand_frontier";
  const auto pdt = check_frontier_logits(op, position_logits_in, path_logprob_in);
  const int64_t frontier_nodes = position_logits_in.size(0), block = position_logits_in.size(1);
  check_dtype(op, "rows", rows_in, at::kLong);
  TORCH_CHECK_VALUE(rows_in.dim() == 1, "spot.", op, ": rows must have 1 dimensions, got shape ",
                    shape_str(rows_in.sizes()));
  const int64_t b = rows_in.size(0);
  TORCH_CHECK_VALUE(b > 0 ? frontier_nodes % b == 0 : frontier_nodes == 0, "spot.", op,
                    ": position_logits must hold w frontier nodes per row, F = b * w with b = ", b,
                    " (rows.shape[0]), got F = ", frontier_nodes);
  const int64_t w = b > 0 ? frontier_nodes / b : 0;
  check_dtype(op, "states", states_in, at::kLong);
  check_shape(op, "states", states_in, {frontier_nodes, block}, "position_logits.shape");
  const auto qdt = check_stale_topk(op, stale_topk_probs, stale_topk_ids, b, block, "[b, B, K]",
                                    "b from rows, B from position_logits");
  check_dtype(op, "block_start", block_start_in, at::kLong);
  check_shape(op, "block_start", block_start_in, {b}, "[b] from rows");
  check_dtype(op, "steps", steps_in, at::kLong);
  check_shape(op, "steps", steps_in, {b}, "[b] from rows");
  check_seed(op, seed);
  check_temperature(op, temperature);
  TORCH_CHECK_VALUE(branch >= 1 && branch <= 65536, "spot.", op, ": branch must lie in [1, 65537), got ", branch);
  TORCH_CHECK_VALUE(width >= 1, "spot.", op, ": width must lie in [1, inf), got ", width);
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

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_expand_frontier_cuda", &spot_cuda::expand_frontier_cuda); }
