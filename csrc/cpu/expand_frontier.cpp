// spot::_expand_frontier_cpu and spot::_expand_steps_cpu: one depth of a static draft tree, one commit or one whole
// rule step per child (docs/ops.md, "Frontier expansion"; the oracle is spot_kernels/reference/expand_frontier.py).
//
// expand_frontier: the CPU kernel of spot::select_children (csrc/cpu/select_children.cpp, reached through the
// dispatcher) on every frontier node, then the glue of one depth in ATen calls, the reference's operations one for
// one: -inf where a child has no token, the children's states, and each row's `width` most probable children (stable
// sort). On a CPU a dispatched ATen call costs no launch, so one dispatcher entry is what this op is for.
//
// expand_steps: plain loops, rows spread over threads. Per frontier node of a row: the eligible positions ranked, the
// Plackett-Luce prefix log-probabilities, the (B + 1) x 8 candidate sets scored and the `branch` best written as
// children; then the row's `width` best children. A position's token (select_children.h, the draw select_children
// makes) is drawn once per row, for the ranks a candidate reaches: at T > 0 the draws are most of the work, and every
// node of a row draws the same. The prefix log-probabilities repeat the reference's arithmetic (torch's logcumsumexp
// and cumsum accumulate sequentially in double, here too), so near-ties order the same.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

#include "select_children.h"

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


// ------------------------------------------------------------------------------------------------ expand_steps

// The candidate sets of a step of m positions, by rank of the drafter's logits: (rank out, rank in) relative to m,
// (0, 0) the first m ranks (spot_kernels/reference/expand_frontier.py, STEP_VARIANTS).
constexpr int kVariants = 8;
constexpr int64_t kRankOut[kVariants] = {0, -1, -1, -1, -1, -1, -2, -2};
constexpr int64_t kRankIn[kVariants] = {0, 0, 1, 2, 3, 4, 0, 1};

// torch's descending stable sort: NaN before every number, then larger values, ties to the lower index.
template <typename L>
inline bool sorts_before(L a, int64_t ia, L b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// torch's log-add-exp of logcumsumexp's scan (ATen's _log_add_exp_helper), in double.
inline double log_add_exp(double x, double y) {
  const double lo = std::min(x, y), hi = std::max(x, y);
  return (lo != hi || std::isfinite(lo)) ? std::log1p(std::exp(lo - hi)) + hi : x;
}

// A row's scratch, reused across the rows a thread takes.
template <typename L>
struct RowScratch {
  std::vector<int64_t> order, missing_prefix, token, picked, children;
  std::vector<L> lv, prefix, cand;
  std::vector<char> missing;
};

// One row of expand_steps: its frontier nodes one after the other, then its next frontier. A position's token is the
// same for every node of the row (the row's stale top-K, noise and step), so it is drawn once, and only for the ranks
// some candidate reaches (a size's first ranks and the four after them).
template <typename L, typename P>
struct StepsRow {
  // inputs, contiguous
  const L *logits, *path, *sizes;
  const int64_t *states, *ids, *rows, *block_start, *steps;
  const P* probs;
  int64_t w, block, top, mask_id, branch, width;
  uint32_t seed_key;
  bool tempered;
  // outputs
  L *child_logprob, *frontier_logprob;
  int64_t *child_states, *frontier, *frontier_states;

  static constexpr int64_t kUndrawn = -2;  // tokens are >= -1

  void operator()(int64_t r, RowScratch<L>& s) const {
    s.token.assign(block, kUndrawn);
    for (int64_t f = r * w; f < (r + 1) * w; ++f) node(r, f, s);
    next_frontier(r, s);
  }

  int64_t token(int64_t r, int64_t p, RowScratch<L>& s) const {
    if (s.token[p] == kUndrawn) {
      const int64_t entry = (r * block + p) * top;
      s.token[p] = position_token(probs + entry, ids + entry, top, tempered, seed_key, rows[r], block_start[r] + p,
                                  steps[r]);
    }
    return s.token[p];
  }

  void node(int64_t r, int64_t f, RowScratch<L>& s) const {
    const int64_t B = block;
    const L big = std::numeric_limits<L>::max() / 4;  // +inf logits: the largest that log-sum-exp keeps finite
    const L* lg_in = logits + f * B;
    const int64_t* state = states + f * B;
    auto logit = [&](int64_t j) { return std::isnan(lg_in[j]) ? -inf_of<L>() : std::min(lg_in[j], big); };

    // eligible positions ranked by (logit desc, position asc)
    s.order.clear();
    for (int64_t j = 0; j < B; ++j)
      if (state[j] == mask_id && logit(j) > -inf_of<L>()) s.order.push_back(j);
    std::sort(s.order.begin(), s.order.end(), [&](int64_t a, int64_t b) {
      const L la = logit(a), lb = logit(b);
      return la > lb || (la == lb && a < b);
    });
    const int64_t n_e = static_cast<int64_t>(s.order.size());
    s.lv.resize(n_e);
    for (int64_t k = 0; k < n_e; ++k) s.lv[k] = logit(s.order[k]);

    // Plackett-Luce: rank k is drawn with log-probability lv[k] - log-sum-exp(lv[k:]); prefix[m] sums ranks < m
    // (the reference's logcumsumexp and cumsum, both sequential in double)
    s.prefix.assign(B + 1, L(0));
    double suffix = -std::numeric_limits<double>::infinity();
    for (int64_t k = n_e - 1; k >= 0; --k) {
      suffix = log_add_exp(static_cast<double>(s.lv[k]), suffix);
      s.prefix[k + 1] = s.lv[k] - static_cast<L>(suffix);  // the step's term, summed below
    }
    double acc = 0;
    for (int64_t k = 0; k < B; ++k) {
      acc += k < n_e ? static_cast<double>(s.prefix[k + 1]) : 0.0;
      s.prefix[k + 1] = static_cast<L>(acc);
    }

    // the tokens of the ranks a candidate reaches; a rank without one cannot be in a child's set
    const L* size = sizes + f * (B + 1);
    int64_t largest = -1;  // the largest possible size; none for a node of path log-probability -inf (no child),
    bool infinite = false;  // unless a size's is +inf (then NaN, as the reference)
    for (int64_t m = 0; m <= B; ++m) {
      if (size[m] > -inf_of<L>()) largest = m;
      infinite = infinite || size[m] == inf_of<L>();
    }
    if (path[f] == -inf_of<L>() && !infinite) largest = -1;
    const int64_t reach = largest < 0 ? 0 : std::min(n_e, largest + 5);  // the ranks a candidate reaches
    s.missing.assign(n_e, 0);
    s.missing_prefix.assign(B + 1, 0);
    for (int64_t k = 0; k < reach; ++k) s.missing[k] = token(r, s.order[k], s) < 0;
    for (int64_t k = 0; k < B; ++k) s.missing_prefix[k + 1] = s.missing_prefix[k] + (k < n_e && s.missing[k]);

    // the candidates that can be children (-inf ones never are: a -inf child is padding, whichever it would be)
    s.cand.assign((B + 1) * kVariants, -inf_of<L>());
    s.picked.clear();
    for (int64_t m = 0; m <= largest; ++m) {
      if (!(size[m] > -inf_of<L>())) continue;
      const L base = path[f] + size[m];
      for (int v = 0; v < kVariants; ++v) {
        L lp;
        if (v == 0) {
          if (m > n_e || s.missing_prefix[m] != 0) continue;
          lp = s.prefix[m];
        } else {  // rank m + out swapped for rank m + in: the prefix's log-probability plus their logit gap
          const int64_t r_out = m + kRankOut[v], r_in = m + kRankIn[v];
          if (r_out < 0 || r_in >= n_e || s.missing_prefix[m] - s.missing[r_out] + s.missing[r_in] != 0) continue;
          lp = s.prefix[m] + (s.lv[r_in] - s.lv[r_out]);  // the gap first, as the reference
        }
        const int64_t c = m * kVariants + v;
        s.cand[c] = base + lp;
        if (s.cand[c] != -inf_of<L>()) s.picked.push_back(c);
      }
    }
    const int64_t kept = std::min<int64_t>(branch, static_cast<int64_t>(s.picked.size()));
    std::partial_sort(s.picked.begin(), s.picked.begin() + kept, s.picked.end(),
                      [&](int64_t a, int64_t b) { return sorts_before(s.cand[a], a, s.cand[b], b); });

    // the children: the node's state with the set's tokens written in; padding children keep the node's state
    for (int64_t c = 0; c < branch; ++c) {
      const int64_t o = f * branch + c;
      int64_t* out = child_states + o * B;
      std::copy(state, state + B, out);
      if (c >= kept) {
        child_logprob[o] = -inf_of<L>();
        continue;
      }
      const int64_t cand = s.picked[c], m = cand / kVariants, v = cand % kVariants;
      child_logprob[o] = s.cand[cand];
      if (!(s.cand[cand] > -inf_of<L>())) continue;  // NaN: no set, as the reference
      const int64_t r_out = v == 0 ? -1 : m + kRankOut[v], r_in = v == 0 ? -1 : m + kRankIn[v];
      for (int64_t k = 0; k < m; ++k)
        if (k != r_out) out[s.order[k]] = s.token[s.order[k]];
      if (r_in >= 0) out[s.order[r_in]] = s.token[s.order[r_in]];
    }
  }

  // the row's `width` most probable children, descending, ties to the lower index (a stable sort)
  void next_frontier(int64_t r, RowScratch<L>& s) const {
    const int64_t n = w * branch, kept = std::min(width, n);
    const L* lp = child_logprob + r * n;
    s.children.resize(n);
    for (int64_t c = 0; c < n; ++c) s.children[c] = c;
    std::partial_sort(s.children.begin(), s.children.begin() + kept, s.children.end(),
                      [&](int64_t a, int64_t c) { return sorts_before(lp[a], a, lp[c], c); });
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t o = r * kept + i, c = s.children[i];
      frontier[o] = c;
      frontier_logprob[o] = lp[c];
      const int64_t* st = child_states + (r * n + c) * block;
      std::copy(st, st + block, frontier_states + o * block);
    }
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> expand_steps_cpu(
    const at::Tensor& position_logits_in, const at::Tensor& states_in, const at::Tensor& path_logprob_in,
    const at::Tensor& size_logprob_in, const at::Tensor& stale_topk_probs_in, const at::Tensor& stale_topk_ids_in,
    int64_t seed, const at::Tensor& rows_in, const at::Tensor& block_start_in, const at::Tensor& steps_in,
    double temperature, int64_t mask_id, int64_t branch, int64_t width) {
  const auto dt = position_logits_in.scalar_type();
  const auto pdt = stale_topk_probs_in.scalar_type();
  TORCH_CHECK_TYPE((dt == at::kFloat || dt == at::kDouble) && (pdt == at::kFloat || pdt == at::kDouble),
                   "spot.expand_steps: position_logits and stale_topk_probs must be float32/float64");
  TORCH_CHECK_VALUE(position_logits_in.dim() == 2 && states_in.sizes() == position_logits_in.sizes() &&
                        states_in.scalar_type() == at::kLong,
                    "spot.expand_steps: position_logits and states must be [F, B] (int64 states)");
  const int64_t frontier = states_in.size(0), block = states_in.size(1);
  TORCH_CHECK_VALUE(rows_in.dim() == 1 && rows_in.scalar_type() == at::kLong, "spot.expand_steps: rows must be [b]");
  const int64_t b = rows_in.size(0);
  TORCH_CHECK_VALUE(b > 0 ? frontier % b == 0 : frontier == 0, "spot.expand_steps: F must be b * w");
  TORCH_CHECK_VALUE(path_logprob_in.scalar_type() == dt && path_logprob_in.dim() == 1 &&
                        path_logprob_in.size(0) == frontier && size_logprob_in.scalar_type() == dt &&
                        size_logprob_in.dim() == 2 && size_logprob_in.size(0) == frontier &&
                        size_logprob_in.size(1) == block + 1,
                    "spot.expand_steps: path_logprob must be [F] and size_logprob [F, B + 1], of position_logits' "
                    "dtype");
  TORCH_CHECK_VALUE(stale_topk_probs_in.dim() == 3 && stale_topk_probs_in.size(0) == b &&
                        stale_topk_probs_in.size(1) == block && stale_topk_ids_in.sizes() == stale_topk_probs_in.sizes() &&
                        stale_topk_ids_in.scalar_type() == at::kLong,
                    "spot.expand_steps: stale_topk_probs / stale_topk_ids must be [b, B, K] (int64 ids)");
  for (const at::Tensor* t : {&block_start_in, &steps_in}) {
    TORCH_CHECK_VALUE(t->scalar_type() == at::kLong && t->dim() == 1 && t->size(0) == b,
                      "spot.expand_steps: block_start and steps must be int64 [b]");
  }
  TORCH_CHECK_VALUE(branch >= 1 && width >= 1, "spot.expand_steps: branch and width must be >= 1");
  TORCH_CHECK_VALUE(seed >= 0, "spot.expand_steps: seed must lie in [0, 2^63)");
  TORCH_CHECK_VALUE(std::isfinite(temperature) && temperature >= 0,
                    "spot.expand_steps: temperature must be finite, >= 0");

  const int64_t w = b > 0 ? frontier / b : 0, n = w * branch, kept = std::min(width, n);
  const auto opts = position_logits_in.options();
  const auto longs = opts.dtype(at::kLong);
  at::Tensor child_logprob = at::empty({b, n}, opts);
  at::Tensor child_states = at::empty({b, n, block}, longs);
  at::Tensor next_frontier = at::empty({b, kept}, longs);
  at::Tensor frontier_states = at::empty({b * kept, block}, longs);  // flat, as the next call takes it
  at::Tensor frontier_logprob = at::empty({b * kept}, opts);
  if (frontier == 0) return {child_logprob, child_states, next_frontier, frontier_states, frontier_logprob};

  const at::Tensor logits = position_logits_in.contiguous(), states = states_in.contiguous();
  const at::Tensor path = path_logprob_in.contiguous(), sizes = size_logprob_in.contiguous();
  const at::Tensor probs = stale_topk_probs_in.contiguous(), ids = stale_topk_ids_in.contiguous();
  const at::Tensor rows = rows_in.contiguous(), block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const int64_t top = probs.size(2);

  AT_DISPATCH_FLOATING_TYPES(dt, "spot_expand_steps_cpu", [&] {
    using L = scalar_t;
    auto run = [&](auto* probs_ptr) {
      using P = std::remove_const_t<std::remove_pointer_t<decltype(probs_ptr)>>;
      const StepsRow<L, P> row{logits.data_ptr<L>(), path.data_ptr<L>(), sizes.data_ptr<L>(),
                               states.data_ptr<int64_t>(), ids.data_ptr<int64_t>(), rows.data_ptr<int64_t>(),
                               block_start.data_ptr<int64_t>(), steps.data_ptr<int64_t>(), probs_ptr, w, block, top,
                               mask_id, branch, width, seed_key(seed), temperature > 0, child_logprob.data_ptr<L>(),
                               frontier_logprob.data_ptr<L>(), child_states.data_ptr<int64_t>(),
                               next_frontier.data_ptr<int64_t>(), frontier_states.data_ptr<int64_t>()};
      parallel_rows(b, w * (block * 16 + branch * block) + block * top * 8, [&](int64_t begin, int64_t end) {
        RowScratch<L> scratch;
        for (int64_t r = begin; r < end; ++r) row(r, scratch);
      });
    };
    if (pdt == at::kDouble) {
      run(probs.data_ptr<double>());
    } else {
      run(probs.data_ptr<float>());
    }
  });
  return {child_logprob, child_states, next_frontier, frontier_states, frontier_logprob};
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) {
  m.impl("_expand_frontier_cpu", &spot_cpu::expand_frontier_cpu);
  m.impl("_expand_steps_cpu", &spot_cpu::expand_steps_cpu);
}
