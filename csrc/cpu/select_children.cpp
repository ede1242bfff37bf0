// spot::_select_children_cpu: drafter child selection (docs/ops.md, "Drafter child selection"; the oracle is
// spot_kernels/reference/drafter.py).
//
// Per frontier node (rows spread over threads): the eligible positions (masked, logit not NaN and not -inf) ranked
// by (logit desc, position asc), the log-softmax over eligible positions (the +inf limit: +inf positions share the
// mass equally), and for each child the Gumbel-max over the stale top-K of its position with the child's coupled
// noise (the reference's words, logs and noise in float64 for float64 stale probabilities, else float32).

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>

#include <tuple>
#include <vector>

#include "select_children.h"

namespace spot_cpu {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> select_children_cpu(
    const at::Tensor& position_logits_in, const at::Tensor& masked_in, const at::Tensor& path_logprob_in,
    const at::Tensor& stale_topk_probs_in, const at::Tensor& stale_topk_ids_in, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, int64_t k) {
  const auto dt = position_logits_in.scalar_type();
  const auto pdt = stale_topk_probs_in.scalar_type();
  TORCH_CHECK_TYPE((dt == at::kFloat || dt == at::kDouble) && (pdt == at::kFloat || pdt == at::kDouble),
                   "spot.select_children: position_logits and stale_topk_probs must be float32/float64");
  TORCH_CHECK_VALUE(position_logits_in.dim() == 2, "spot.select_children: position_logits must be [F, B]");
  const int64_t frontier = position_logits_in.size(0);
  const int64_t block = position_logits_in.size(1);
  TORCH_CHECK_VALUE(masked_in.scalar_type() == at::kBool && masked_in.sizes() == position_logits_in.sizes(),
                    "spot.select_children: masked must be bool [F, B]");
  TORCH_CHECK_VALUE(path_logprob_in.scalar_type() == dt && path_logprob_in.dim() == 1 &&
                        path_logprob_in.size(0) == frontier,
                    "spot.select_children: path_logprob must be [F] of position_logits' dtype");
  TORCH_CHECK_VALUE(stale_topk_probs_in.dim() == 3 && stale_topk_probs_in.size(0) == frontier &&
                        stale_topk_probs_in.size(1) == block && stale_topk_ids_in.sizes() == stale_topk_probs_in.sizes() &&
                        stale_topk_ids_in.scalar_type() == at::kLong,
                    "spot.select_children: stale_topk_probs / stale_topk_ids must be [F, B, K] (int64 ids)");
  for (const at::Tensor* t : {&rows_in, &block_start_in, &steps_in}) {
    TORCH_CHECK_VALUE(t->scalar_type() == at::kLong && t->dim() == 1 && t->size(0) == frontier,
                      "spot.select_children: rows, block_start, steps must be int64 [F]");
  }
  TORCH_CHECK_VALUE(k >= 1, "spot.select_children: k must be >= 1");
  TORCH_CHECK_VALUE(seed >= 0, "spot.select_children: seed must lie in [0, 2^63)");
  TORCH_CHECK_VALUE(std::isfinite(temperature) && temperature >= 0,
                    "spot.select_children: temperature must be finite, >= 0");

  const auto opts = position_logits_in.options();
  at::Tensor child_pos = at::empty({frontier, k}, opts.dtype(at::kLong));
  at::Tensor child_logprob = at::empty({frontier, k}, opts);
  at::Tensor child_tokens = at::empty({frontier, k}, opts.dtype(at::kLong));
  if (frontier == 0) return {child_pos, child_logprob, child_tokens};

  const at::Tensor logits = position_logits_in.contiguous();
  const at::Tensor masked = masked_in.contiguous();
  const at::Tensor path = path_logprob_in.contiguous();
  const at::Tensor probs = stale_topk_probs_in.contiguous();
  const at::Tensor ids = stale_topk_ids_in.contiguous();
  const at::Tensor rows = rows_in.contiguous();
  const at::Tensor block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const int64_t top = probs.size(2);
  const bool* m_ptr = masked.data_ptr<bool>();
  const int64_t* id_ptr = ids.data_ptr<int64_t>();
  const int64_t* r_ptr = rows.data_ptr<int64_t>();
  const int64_t* b_ptr = block_start.data_ptr<int64_t>();
  const int64_t* s_ptr = steps.data_ptr<int64_t>();
  int64_t* pos_out = child_pos.data_ptr<int64_t>();
  int64_t* tok_out = child_tokens.data_ptr<int64_t>();
  const uint32_t skey = seed_key(seed);
  const bool tempered = temperature > 0;

  AT_DISPATCH_FLOATING_TYPES(dt, "spot_select_children_cpu", [&] {
    using L = scalar_t;
    const L* l_ptr = logits.data_ptr<L>();
    const L* path_ptr = path.data_ptr<L>();
    L* lp_out = child_logprob.data_ptr<L>();
    parallel_rows(frontier, block * 8 + k * top * 8, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> order;
      for (int64_t f = begin; f < end; ++f) {
        const L* lg = l_ptr + f * block;
        const bool* mk = m_ptr + f * block;
        // Eligible positions and the log-softmax normaliser (the +inf limit when some logit is +inf).
        order.clear();
        L mx = -inf_of<L>();
        int64_t n_inf = 0;
        for (int64_t j = 0; j < block; ++j) {
          const L x = lg[j];
          if (!mk[j] || std::isnan(x) || x == -inf_of<L>()) continue;
          order.push_back(j);
          n_inf += x == inf_of<L>();
          mx = std::max(mx, x);
        }
        L log_norm;
        if (n_inf > 0) {
          log_norm = std::log(static_cast<L>(n_inf));
        } else if (order.empty()) {
          log_norm = -inf_of<L>();
        } else {
          L s = L(0);
          for (int64_t j : order) s += std::exp(lg[j] - mx);
          log_norm = std::log(s) + mx;
        }
        const int64_t chosen = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
        std::partial_sort(order.begin(), order.begin() + chosen, order.end(), [lg](int64_t a, int64_t b) {
          return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
        });
        for (int64_t c = 0; c < k; ++c) {
          const int64_t o = f * k + c;
          if (c >= chosen) {
            pos_out[o] = -1;
            lp_out[o] = -inf_of<L>();
            tok_out[o] = -1;
            continue;
          }
          const int64_t p = order[c];
          pos_out[o] = p;
          const L key = n_inf > 0 ? (lg[p] == inf_of<L>() ? L(0) : -inf_of<L>()) : lg[p];
          lp_out[o] = path_ptr[f] + (key - log_norm);
          const int64_t entry = (f * block + p) * top;  // position p's stale top-K
          tok_out[o] = pdt == at::kDouble
                           ? position_token(probs.data_ptr<double>() + entry, id_ptr + entry, top, tempered, skey,
                                            r_ptr[f], b_ptr[f] + p, s_ptr[f])
                           : position_token(probs.data_ptr<float>() + entry, id_ptr + entry, top, tempered, skey,
                                            r_ptr[f], b_ptr[f] + p, s_ptr[f]);
        }
      }
    });
  });
  return {child_pos, child_logprob, child_tokens};
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_select_children_cpu", &spot_cpu::select_children_cpu); }
