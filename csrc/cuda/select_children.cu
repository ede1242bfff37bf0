// spot::_select_children_cuda: drafter child selection (docs/ops.md, "Drafter child selection").
//
// One warp per frontier node, running select_children.cuh's node_children (the per-node code, shared with
// expand_frontier.cu): the k most likely masked positions by counting ranks, their path log-probabilities and
// their tokens by the coupled-noise Gumbel-max over the stale top-K.

#include "select_children.cuh"

namespace spot_cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / 32;

template <typename P, typename Q>
__global__ void __launch_bounds__(kThreads)
    select_children_kernel(const P* __restrict__ position_logits, const bool* __restrict__ masked,
                           const P* __restrict__ path_logprob, StaleTopK<Q> stale, uint32_t skey,
                           const int64_t* __restrict__ rows, const int64_t* __restrict__ block_start,
                           const int64_t* __restrict__ steps, bool tempered, int64_t frontier, int64_t block, int64_t k,
                           int64_t* __restrict__ child_pos, P* __restrict__ child_logprob,
                           int64_t* __restrict__ child_tokens) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (f >= frontier) return;  // whole warps only: the shuffles of node_children stay full-warp
  const bool* mask = masked + f * block;
  const auto is_masked = [mask](int64_t j) { return mask[j]; };
  node_children(position_logits + f * block, is_masked, block, path_logprob[f], stale.at(f), skey, rows[f],
                block_start[f], steps[f], tempered, k, child_pos + f * k, child_logprob + f * k, child_tokens + f * k);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> select_children_cuda(
    const at::Tensor& position_logits_in, const at::Tensor& masked_in, const at::Tensor& path_logprob_in,
    const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, int64_t k) {
  const char* op = "select_children";
  const auto pdt = check_frontier_logits(op, position_logits_in, path_logprob_in);
  const int64_t frontier = position_logits_in.size(0), block = position_logits_in.size(1);
  check_dtype(op, "masked", masked_in, at::kBool);
  check_shape(op, "masked", masked_in, {frontier, block}, "position_logits.shape");
  const auto qdt = check_stale_topk(op, stale_topk_probs, stale_topk_ids, frontier, block, "[F, B, K]",
                                    "F, B from position_logits");
  check_dtype(op, "rows", rows_in, at::kLong);
  check_shape(op, "rows", rows_in, {frontier}, "[F] from position_logits");
  check_dtype(op, "block_start", block_start_in, at::kLong);
  check_shape(op, "block_start", block_start_in, {frontier}, "[F] from position_logits");
  check_dtype(op, "steps", steps_in, at::kLong);
  check_shape(op, "steps", steps_in, {frontier}, "[F] from position_logits");
  check_seed(op, seed);
  check_temperature(op, temperature);
  TORCH_CHECK_VALUE(k >= 1, "spot.", op, ": k must lie in [1, inf), got ", k);
  check_cuda(op, {{"position_logits", &position_logits_in}, {"masked", &masked_in}, {"path_logprob", &path_logprob_in},
                  {"stale_topk_probs", &stale_topk_probs}, {"stale_topk_ids", &stale_topk_ids}, {"rows", &rows_in},
                  {"block_start", &block_start_in}, {"steps", &steps_in}});
  c10::cuda::CUDAGuard guard(position_logits_in.device());

  const auto opts = position_logits_in.options();
  at::Tensor child_pos = at::empty({frontier, k}, opts.dtype(at::kLong));
  at::Tensor child_logprob = at::empty({frontier, k}, opts);
  at::Tensor child_tokens = at::empty({frontier, k}, opts.dtype(at::kLong));
  if (frontier == 0) return {child_pos, child_logprob, child_tokens};

  const at::Tensor logits = position_logits_in.contiguous();
  const at::Tensor masked = masked_in.contiguous();
  const at::Tensor path = path_logprob_in.contiguous();
  const at::Tensor rows = rows_in.contiguous();
  const at::Tensor block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream(position_logits_in.device().index());
  const unsigned grid = static_cast<unsigned>(ceil_div(frontier, kWarpsPerBlock));

  with_children_dtypes(pdt, qdt, [&](auto p_type, auto q_type) {
    using P = decltype(p_type);
    using Q = decltype(q_type);
    auto kernel = select_children_kernel<P, Q>;
    SPOT_LAUNCH(kernel, grid, kThreads, 0, stream, logits.data_ptr<P>(), masked.data_ptr<bool>(), path.data_ptr<P>(),
                stale_topk<Q>(stale_topk_probs, stale_topk_ids), seed_key(seed), rows.data_ptr<int64_t>(),
                block_start.data_ptr<int64_t>(), steps.data_ptr<int64_t>(), temperature > 0, frontier, block, k,
                child_pos.data_ptr<int64_t>(), child_logprob.data_ptr<P>(), child_tokens.data_ptr<int64_t>());
  });
  SPOT_LAUNCH_CHECK();
  return {child_pos, child_logprob, child_tokens};
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_select_children_cuda", &spot_cuda::select_children_cuda); }
