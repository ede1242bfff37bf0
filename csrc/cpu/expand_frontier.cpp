// spot::_expand_frontier_cpu: one depth of a static draft tree (docs/ops.md, "Frontier expansion"; the oracle is
// spot_kernels/reference/expand_frontier.py).
//
// The CPU kernel of spot::select_children (csrc/cpu/select_children.cpp, reached through the dispatcher) on every
// frontier node, then the glue of one depth in ATen calls, the reference's operations one for one: -inf where a
// child has no token, the children's states, and each row's `width` most probable children (stable sort).
// On a CPU a dispatched ATen call costs no launch, so one dispatcher entry is what this op is for.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <limits>
#include <tuple>

#include "common.h"

namespace spot_cpu {
namespace {

using Children = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Children select_children(const at::Tensor& logits, const at::Tensor& masked, const at::Tensor& path,
                         const at::Tensor& probs, const at::Tensor& ids, int64_t seed, const at::Tensor& rows,
                         const at::Tensor& block_start, const at::Tensor& steps, double temperature, int64_t k) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("spot::_select_children_cpu", "")
          .typed<Children(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&, double,
                          int64_t)>();
  return op.call(logits, masked, path, probs, ids, seed, rows, block_start, steps, temperature, k);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> expand_frontier_cpu(
    const at::Tensor& position_logits, const at::Tensor& states, const at::Tensor& path_logprob,
    const at::Tensor& stale_topk_probs, const at::Tensor& stale_topk_ids, int64_t seed, const at::Tensor& rows,
    const at::Tensor& block_start, const at::Tensor& steps, double temperature, int64_t mask_id, int64_t branch,
    int64_t width) {
  TORCH_CHECK_VALUE(position_logits.dim() == 2 && states.sizes() == position_logits.sizes() &&
                        states.scalar_type() == at::kLong,
                    "spot.expand_frontier: position_logits and states must be [F, B] (int64 states)");
  TORCH_CHECK_VALUE(path_logprob.dim() == 1 && stale_topk_probs.dim() == 3 && rows.dim() == 1,
                    "spot.expand_frontier: path_logprob must be [F], stale_topk_probs [b, B, K], rows [b]");
  TORCH_CHECK_VALUE(width >= 1, "spot.expand_frontier: width must be >= 1");
  const int64_t b = rows.size(0), frontier = states.size(0), block = states.size(1);
  TORCH_CHECK_VALUE(b > 0 ? frontier % b == 0 : frontier == 0, "spot.expand_frontier: F must be b * w");
  const int64_t w = b > 0 ? frontier / b : 0, n = w * branch;
  const at::Tensor node_row = at::arange(b, states.options()).repeat_interleave(w);
  auto [pos, logprob, tok] = select_children(
      position_logits, states.eq(mask_id), path_logprob,
      stale_topk_probs.index_select(0, node_row), stale_topk_ids.index_select(0, node_row), seed,
      rows.index_select(0, node_row), block_start.index_select(0, node_row), steps.index_select(0, node_row),
      temperature, branch);
  const at::Tensor child_logprob =
      logprob.masked_fill(tok.lt(0), -std::numeric_limits<double>::infinity()).view({b, n});
  const at::Tensor j = at::arange(block, states.options());
  const at::Tensor child_states =
      at::where(pos.unsqueeze(-1).eq(j), tok.clamp_min(0).unsqueeze(-1), states.unsqueeze(1))
          .view({b, n, block});
  const at::Tensor order =
      std::get<1>(child_logprob.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true)).slice(1, 0, width);
  const at::Tensor frontier_states = child_states.gather(1, order.unsqueeze(-1).expand({b, order.size(1), block}));
  const int64_t kept = order.size(1);
  return {pos.view({b, n}), child_logprob, tok.view({b, n}), child_states, order,
          frontier_states.view({b * kept, block}), child_logprob.gather(1, order).view({b * kept})};
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_expand_frontier_cpu", &spot_cpu::expand_frontier_cpu); }
