// select_children's per-node device code (docs/ops.md, "Drafter child selection"), shared by the kernels of
// spot::_select_children_cuda (select_children.cu, one warp per frontier node) and spot::_expand_frontier_cuda
// (expand_frontier.cu, the warps of a row's block over its frontier nodes), as the Triton kernels share
// `node_children`; its per-position token (`position_token`) also drafts spot::_expand_steps_cuda's sets; and the
// host checks and dtype dispatch of these launches.
//
// One warp computes one node's k children; lane l owns block positions l, l + 32, ... Two warp reductions give the
// number of eligible positions (masked, logit not NaN or -inf), the number of +inf logits and the finite maximum, a
// third the normaliser sum exp(x - max). Each eligible position's rank among the eligible ones (logit descending,
// ties lowest position) is counted directly (O(B^2 / 32) per node, B is a block size), and a position of rank r < k
// writes child slot r. Its token is the Gumbel-max over its stale top-K entries with the child's coupled noise (the
// same u32 words and float32 uniforms as the reference), computed by the owning lane. Stale tensors are read through
// their strides, so expanded views cost nothing.
#pragma once

#include "common.cuh"

namespace spot_cuda {

template <typename P, typename Masked>
__device__ __forceinline__ P eligible_key(const P* logits, const Masked& masked, int64_t j, bool& eligible) {
  P x = logits[j];
  if (x != x) x = -inf_of<P>();  // NaN counts as -inf
  eligible = masked(j) && x > -inf_of<P>();
  return x;
}

// The stale top-K, read through its strides (expanded views cost nothing): entry (r, j, i) of the probabilities at
// r * p_lead + j * p_pos + i * p_entry, of the ids likewise; r is a frontier node or a row, j a position.
template <typename Q>
struct StaleTopK {
  const Q* probs;
  const int64_t* ids;
  int64_t p_lead, p_pos, p_entry, i_lead, i_pos, i_entry, top;

  // The top-K of node or row r (its entries from position 0).
  __device__ StaleTopK at(int64_t r) const {
    StaleTopK s = *this;
    s.probs += r * p_lead;
    s.ids += r * i_lead;
    return s;
  }
};

// The token of a child committing block position j: the Gumbel-max over j's stale top-K entries (ids >= 0, probs
// > 0; ties keep the lowest entry) with the coupled noise of (row, position, step) at T > 0, the stale top-1 id at
// T = 0, -1 when K = 0 or no entry qualifies. The one draw of select_children and expand_steps, so that both commit
// the same token at the same position and step.
template <typename Q>
__device__ __forceinline__ int64_t position_token(const StaleTopK<Q>& stale, int64_t j, bool tempered, uint32_t skey,
                                                  int64_t row, int64_t position, int64_t step) {
  if (stale.top == 0) return -1;
  const int64_t* ids = stale.ids + j * stale.i_pos;
  if (!tempered) return ids[0];
  const Q* probs = stale.probs + j * stale.p_pos;
  const uint32_t key = row_key(skey, row, position, step);
  int64_t token = -1;
  Q best = -inf_of<Q>();
  for (int64_t i = 0; i < stale.top; ++i) {
    const int64_t id = ids[i * stale.i_entry];
    const Q p = probs[i * stale.p_entry];
    if (!(id >= 0 && p > Q(0))) continue;
    const Q v = dlog(p) + gumbel_from_word<Q>(noise_word(key, id));
    if (v > best || token < 0) {  // strict: ties keep the lowest i
      best = v;
      token = id;
    }
  }
  return token;
}

// The k children of one frontier node, written to slots 0..k-1 of pos_out / lp_out / tok_out. Called by a whole warp
// (every lane, the same arguments). logits: the node's B logits; masked(j): whether position j is masked; path: the
// node's path log-probability; stale: its top-K (StaleTopK::at); row, start, step: its noise row, block start and step;
// skey: seed_key(seed); tempered: temperature > 0.
template <typename P, typename Q, typename Masked>
__device__ void node_children(const P* logits, const Masked& masked, int64_t block, P path, const StaleTopK<Q>& stale,
                              uint32_t skey, int64_t row, int64_t start, int64_t step, bool tempered, int64_t k,
                              int64_t* pos_out, P* lp_out, int64_t* tok_out) {
  const int lane = threadIdx.x & 31;
  int n_eligible = 0, n_inf = 0;
  P m = -inf_of<P>();
  for (int64_t j = lane; j < block; j += 32) {
    bool e;
    const P x = eligible_key(logits, masked, j, e);
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
      const P x = eligible_key(logits, masked, j, e);
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

  for (int64_t j = lane; j < block; j += 32) {
    bool e;
    const P x = eligible_key(logits, masked, j, e);
    if (!e) continue;
    int64_t rank = 0;
    for (int64_t i = 0; i < block && rank < k; ++i) {
      bool ei;
      const P xi = eligible_key(logits, masked, i, ei);
      rank += ei && (xi > x || (xi == x && i < j));
    }
    if (rank >= k) continue;
    pos_out[rank] = j;
    P d;
    if (n_inf > 0) {
      d = x == inf_of<P>() ? P(0) - log_norm : -inf_of<P>();
    } else {
      d = x - log_norm;
    }
    lp_out[rank] = path + d;

    tok_out[rank] = position_token(stale, j, tempered, skey, row, start + j, step);
  }
  // Padding: fewer eligible positions than children asked for.
  for (int64_t r = (n_eligible < k ? n_eligible : k) + lane; r < k; r += 32) {
    pos_out[r] = -1;
    lp_out[r] = -inf_of<P>();
    tok_out[r] = -1;
  }
}

// ------------------------------------------------------------------------------------ host code both ops share

// position_logits [F, B] float32/float64 and path_logprob [F] of its dtype; returns that dtype.
inline c10::ScalarType check_frontier_logits(const char* op, const at::Tensor& logits, const at::Tensor& path) {
  const auto pdt = logits.scalar_type();
  TORCH_CHECK_TYPE(pdt == at::kFloat || pdt == at::kDouble, "spot.", op,
                   ": position_logits must have dtype float32/float64, got ", dtype_name(pdt));
  TORCH_CHECK_VALUE(logits.dim() == 2, "spot.", op, ": position_logits must have 2 dimensions, got shape ",
                    shape_str(logits.sizes()));
  check_dtype(op, "path_logprob", path, pdt);
  check_shape(op, "path_logprob", path, {logits.size(0)}, "[F] from position_logits");
  return pdt;
}

// stale_topk_probs [lead, B, K] float32/float64 and stale_topk_ids int64 of its shape (`shape` and `from` name lead
// and B in the message: "[F, B, K]", "F, B from position_logits"); returns the probabilities' dtype.
inline c10::ScalarType check_stale_topk(const char* op, const at::Tensor& probs, const at::Tensor& ids, int64_t lead,
                                        int64_t block, const char* shape, const char* from) {
  const auto qdt = probs.scalar_type();
  TORCH_CHECK_TYPE(qdt == at::kFloat || qdt == at::kDouble, "spot.", op,
                   ": stale_topk_probs must have dtype float32/float64, got ", dtype_name(qdt));
  TORCH_CHECK_VALUE(probs.dim() == 3, "spot.", op, ": stale_topk_probs must have 3 dimensions, got shape ",
                    shape_str(probs.sizes()));
  TORCH_CHECK_VALUE(probs.size(0) == lead && probs.size(1) == block, "spot.", op, ": stale_topk_probs must have shape ",
                    shape, " = [", lead, ", ", block, ", K] (", from, "), got ", shape_str(probs.sizes()));
  check_dtype(op, "stale_topk_ids", ids, at::kLong);
  check_shape(op, "stale_topk_ids", ids, probs.sizes(), "stale_topk_probs.shape");
  return qdt;
}

template <typename Q>
inline StaleTopK<Q> stale_topk(const at::Tensor& probs, const at::Tensor& ids) {
  return {probs.data_ptr<Q>(), ids.data_ptr<int64_t>(), probs.stride(0), probs.stride(1), probs.stride(2),
          ids.stride(0), ids.stride(1), ids.stride(2), probs.size(2)};
}

// f(P(), Q()) with P, Q the compute types (float or double) of the position logits and of the stale probabilities.
template <typename F>
void with_children_dtypes(c10::ScalarType pdt, c10::ScalarType qdt, const F& f) {
  if (pdt == at::kFloat) {
    if (qdt == at::kFloat) {
      f(float(), float());
    } else {
      f(float(), double());
    }
  } else if (qdt == at::kFloat) {
    f(double(), float());
  } else {
    f(double(), double());
  }
}

}  // namespace spot_cuda
