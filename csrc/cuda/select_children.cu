// spot::_select_children_cuda: drafter child selection (docs/ops.md, "Drafter child selection").
//
// One warp per frontier node; lane l owns block positions l, l + 32, ... Two warp reductions give the number of
// eligible positions (masked, logit not NaN or -inf), the number of +inf logits and the finite maximum, a third
// the normaliser sum exp(x - max). Each eligible position's rank among the eligible ones (logit descending, ties
// lowest position) is counted directly (O(B^2 / 32) per node, B is a block size), and a position of rank r < k
// writes child slot r. Its token is the Gumbel-max over its stale top-K entries with the child's coupled noise
// (the same u32 words and float32 uniforms as the reference), computed by the owning lane. Stale tensors are read
// through their strides, so expanded views cost nothing.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / 32;

template <typename P>
__device__ __forceinline__ P eligible_key(const P* logits, const bool* masked, int64_t j, bool& eligible) {
  P x = logits[j];
  if (x != x) x = -inf_of<P>();  // NaN counts as -inf
  eligible = masked[j] && x > -inf_of<P>();
  return x;
}

template <typename P, typename Q>
__global__ void __launch_bounds__(kThreads)
    select_children_kernel(const P* __restrict__ position_logits, const bool* __restrict__ masked,
                           const P* __restrict__ path_logprob, const Q* __restrict__ stale_p,
                           const int64_t* __restrict__ stale_id, int64_t sp0, int64_t sp1, int64_t sp2, int64_t si0,
                           int64_t si1, int64_t si2, int64_t top, uint32_t skey, const int64_t* __restrict__ rows,
                           const int64_t* __restrict__ block_start, const int64_t* __restrict__ steps,
                           bool tempered, int64_t frontier, int64_t block, int64_t k, int64_t* __restrict__ child_pos,
                           P* __restrict__ child_logprob, int64_t* __restrict__ child_tokens) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (f >= frontier) return;  // whole warps only: the shuffles below stay full-warp
  const int lane = threadIdx.x & 31;
  const P* logits = position_logits + f * block;
  const bool* mask = masked + f * block;

  int n_eligible = 0, n_inf = 0;
  P m = -inf_of<P>();
  for (int64_t j = lane; j < block; j += 32) {
    bool e;
    const P x = eligible_key(logits, mask, j, e);
    if (!e) continue;
    ++n_eligible;
    if (x == inf_of<P>()) {
      ++n_inf;
    } else if (x > m) {
      m = x;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    n_eligible += shfl_xor(n_eligible, off);
    n_inf += shfl_xor(n_inf, off);
    const P o = shfl_xor(m, off);
    m = o > m ? o : m;
  }
  // log of the normaliser over eligible positions; with +inf logits the limit: they share the mass equally.
  P log_norm;
  if (n_inf > 0) {
    log_norm = dlog(static_cast<P>(n_inf));
  } else {
    P sum = P(0);
    for (int64_t j = lane; j < block; j += 32) {
      bool e;
      const P x = eligible_key(logits, mask, j, e);
      if (e) sum += dexp(x - m);
    }
    // Fixed-order tree sum, then lane 0's value for everyone.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const P o = __shfl_down_sync(kFullMask, sum, off);
      if (lane + off < 32) sum += o;
    }
    sum = shfl(sum, 0);
    log_norm = n_eligible > 0 ? m + dlog(sum) : -inf_of<P>();
  }
  const P path = path_logprob[f];
  const uint32_t key_base = skey;

  for (int64_t j = lane; j < block; j += 32) {
    bool e;
    const P x = eligible_key(logits, mask, j, e);
    if (!e) continue;
    int64_t rank = 0;
    for (int64_t i = 0; i < block && rank < k; ++i) {
      bool ei;
      const P xi = eligible_key(logits, mask, i, ei);
      rank += ei && (xi > x || (xi == x && i < j));
    }
    if (rank >= k) continue;
    const int64_t slot = f * k + rank;
    child_pos[slot] = j;
    P d;
    if (n_inf > 0) {
      d = x == inf_of<P>() ? P(0) - log_norm : -inf_of<P>();
    } else {
      d = x - log_norm;
    }
    child_logprob[slot] = path + d;

    int64_t token = -1;
    if (top > 0) {
      const Q* probs = stale_p + f * sp0 + j * sp1;
      const int64_t* ids = stale_id + f * si0 + j * si1;
      if (!tempered) {
        token = ids[0];
      } else {
        const uint32_t key = row_key(key_base, rows[f], block_start[f] + j, steps[f]);
        Q best = -inf_of<Q>();
        for (int64_t i = 0; i < top; ++i) {
          const int64_t id = ids[i * si2];
          const Q p = probs[i * sp2];
          if (!(id >= 0 && p > Q(0))) continue;
          const Q v = dlog(p) + gumbel_from_word<Q>(noise_word(key, id));
          if (v > best || token < 0) {  // strict: ties keep the lowest i
            best = v;
            token = id;
          }
        }
      }
    }
    child_tokens[slot] = token;
  }
  // Padding: fewer eligible positions than children asked for.
  for (int64_t r = (n_eligible < k ? n_eligible : k) + lane; r < k; r += 32) {
    child_pos[f * k + r] = -1;
    child_logprob[f * k + r] = -inf_of<P>();
    child_tokens[f * k + r] = -1;
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> select_children_cuda(
    const at::Tensor& position_logits_in, const at::Tensor& masked_in, const at::Tensor& path_logprob_in,
    const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, int64_t k) {
  const char* op = "select_children";
  const auto pdt = position_logits_in.scalar_type();
  TORCH_CHECK_TYPE(pdt == at::kFloat || pdt == at::kDouble, "spot.", op,
                   ": position_logits must have dtype float32/float64, got ", dtype_name(pdt));
  TORCH_CHECK_VALUE(position_logits_in.dim() == 2, "spot.", op, ": position_logits must have 2 dimensions, got shape ",
                    shape_str(position_logits_in.sizes()));
  const int64_t frontier = position_logits_in.size(0), block = position_logits_in.size(1);
  check_dtype(op, "masked", masked_in, at::kBool);
  check_shape(op, "masked", masked_in, {frontier, block}, "position_logits.shape");
  check_dtype(op, "path_logprob", path_logprob_in, pdt);
  check_shape(op, "path_logprob", path_logprob_in, {frontier}, "[F] from position_logits");
  const auto qdt = stale_topk_probs.scalar_type();
  TORCH_CHECK_TYPE(qdt == at::kFloat || qdt == at::kDouble, "spot.", op,
                   ": stale_topk_probs must have dtype float32/float64, got ", dtype_name(qdt));
  TORCH_CHECK_VALUE(stale_topk_probs.dim() == 3, "spot.", op, ": stale_topk_probs must have 3 dimensions, got shape ",
                    shape_str(stale_topk_probs.sizes()));
  TORCH_CHECK_VALUE(stale_topk_probs.size(0) == frontier && stale_topk_probs.size(1) == block, "spot.", op,
                    ": stale_topk_probs must have shape [F, B, K] = [", frontier, ", ", block,
                    ", K] (F, B from position_logits), got ", shape_str(stale_topk_probs.sizes()));
  check_dtype(op, "stale_topk_ids", stale_topk_ids, at::kLong);
  check_shape(op, "stale_topk_ids", stale_topk_ids, stale_topk_probs.sizes(), "stale_topk_probs.shape");
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
  const int64_t top = stale_topk_probs.size(2);
  const auto stream = c10::cuda::getCurrentCUDAStream(position_logits_in.device().index());
  const unsigned grid = static_cast<unsigned>(ceil_div(frontier, kWarpsPerBlock));

#define SPOT_SELECT_LAUNCH(P, Q)                                                                                     \
  auto kernel = select_children_kernel<P, Q>;                                                                        \
  SPOT_LAUNCH(kernel, grid, kThreads, 0, stream,                                                                     \
      logits.data_ptr<P>(), masked.data_ptr<bool>(), path.data_ptr<P>(), stale_topk_probs.data_ptr<Q>(),             \
      stale_topk_ids.data_ptr<int64_t>(), stale_topk_probs.stride(0), stale_topk_probs.stride(1),                   \
      stale_topk_probs.stride(2), stale_topk_ids.stride(0), stale_topk_ids.stride(1), stale_topk_ids.stride(2), top, \
      seed_key(seed), rows.data_ptr<int64_t>(), block_start.data_ptr<int64_t>(), steps.data_ptr<int64_t>(),         \
      temperature > 0, frontier, block, k, child_pos.data_ptr<int64_t>(), child_logprob.data_ptr<P>(),             \
      child_tokens.data_ptr<int64_t>())

  if (pdt == at::kFloat && qdt == at::kFloat) {
    SPOT_SELECT_LAUNCH(float, float);
  } else if (pdt == at::kFloat) {
    SPOT_SELECT_LAUNCH(float, double);
  } else if (qdt == at::kFloat) {
    SPOT_SELECT_LAUNCH(double, float);
  } else {
    SPOT_SELECT_LAUNCH(double, double);
  }
#undef SPOT_SELECT_LAUNCH
  SPOT_LAUNCH_CHECK();
  return {child_pos, child_logprob, child_tokens};
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_select_children_cuda", &spot_cuda::select_children_cuda); }
