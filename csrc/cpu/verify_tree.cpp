// spot::_verify_tree_cpu and spot::_verify_steps_cpu: parallel tree verification, one commit or one rule step per
// node (docs/ops.md, "Parallel verification"; the oracle is spot_kernels/reference/verify_tree.py).
//
// Parents precede children (parents[i] < i, checked by the router), so one pass in node order decides acceptance
// and depth: node i > 0 is accepted iff its parent is accepted and its drafted transition is the parent's own
// (verify_tree: the drafted commit is the parent's target commit; verify_steps: the node's state is the parent's
// successor, position for position). The deepest accepted node (ties: lowest index) is walked back to the root to
// list the commits. Batch rows are independent and spread over threads.

#include <ATen/ops/empty.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "common.h"

namespace spot_cpu {
namespace {

// Acceptance in node order and the accepted chain of one row: node i > 0 is accepted iff its parent p is and
// edge(i, p) holds. Fills chain[t] = the ancestor at depth t of the deepest accepted node (ties: lowest index),
// t <= d, and returns d (accepted and depth are scratch of N entries).
template <typename Edge>
int64_t accepted_chain(const char* op, const int64_t* par, int64_t n, const Edge& edge, std::vector<char>& accepted,
                       std::vector<int64_t>& depth, std::vector<int64_t>& chain) {
  accepted[0] = 1;
  depth[0] = 0;
  int64_t deepest = 0;
  for (int64_t i = 1; i < n; ++i) {
    const int64_t p = par[i];
    TORCH_CHECK_VALUE(p < i, "spot.", op, ": parents must precede children");
    accepted[i] = p >= 0 && accepted[p] && edge(i, p);
    if (!accepted[i]) continue;
    depth[i] = depth[p] + 1;
    if (depth[i] > depth[deepest]) deepest = i;  // strict: ties keep the lowest index
  }
  const int64_t d = depth[deepest];
  for (int64_t node = deepest, t = d; t >= 0; --t) {
    chain[t] = node;
    node = t > 0 ? par[node] : node;
  }
  return d;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> verify_tree_cpu(
    const at::Tensor& parents_in, const at::Tensor& draft_pos_in, const at::Tensor& draft_tokens_in,
    const at::Tensor& target_pos_in, const at::Tensor& target_tokens_in, const at::Tensor& block_in) {
  TORCH_CHECK_VALUE(parents_in.dim() == 2 && parents_in.size(1) >= 1, "spot.verify_tree: parents must be [b, N], N >= 1");
  TORCH_CHECK_VALUE(block_in.dim() == 2 && block_in.size(0) == parents_in.size(0),
                    "spot.verify_tree: block must be [b, B]");
  for (const at::Tensor* t : {&parents_in, &draft_pos_in, &draft_tokens_in, &target_pos_in, &target_tokens_in,
                              &block_in}) {
    TORCH_CHECK_TYPE(t->scalar_type() == at::kLong, "spot.verify_tree: every argument must be int64");
  }
  for (const at::Tensor* t : {&draft_pos_in, &draft_tokens_in, &target_pos_in, &target_tokens_in}) {
    TORCH_CHECK_VALUE(t->sizes() == parents_in.sizes(), "spot.verify_tree: node tensors must have parents' shape");
  }
  const int64_t b = parents_in.size(0);
  const int64_t n = parents_in.size(1);
  const int64_t width = block_in.size(1);
  const auto opts = parents_in.options();
  at::Tensor accepted_pos = at::empty({b, n}, opts);
  at::Tensor accepted_tokens = at::empty({b, n}, opts);
  at::Tensor num_accepted = at::empty({b}, opts);
  at::Tensor new_block = block_in.contiguous().clone();
  at::Tensor last_node = at::empty({b}, opts);
  if (b == 0) return {accepted_pos, accepted_tokens, num_accepted, new_block, last_node};

  const at::Tensor parents = parents_in.contiguous();
  const at::Tensor draft_pos = draft_pos_in.contiguous();
  const at::Tensor draft_tokens = draft_tokens_in.contiguous();
  const at::Tensor target_pos = target_pos_in.contiguous();
  const at::Tensor target_tokens = target_tokens_in.contiguous();
  const int64_t* par = parents.data_ptr<int64_t>();
  const int64_t* dpos = draft_pos.data_ptr<int64_t>();
  const int64_t* dtok = draft_tokens.data_ptr<int64_t>();
  const int64_t* tpos = target_pos.data_ptr<int64_t>();
  const int64_t* ttok = target_tokens.data_ptr<int64_t>();
  int64_t* apos = accepted_pos.data_ptr<int64_t>();
  int64_t* atok = accepted_tokens.data_ptr<int64_t>();
  int64_t* nacc = num_accepted.data_ptr<int64_t>();
  int64_t* blk = new_block.data_ptr<int64_t>();
  int64_t* last = last_node.data_ptr<int64_t>();

  parallel_rows(b, n * 4, [&](int64_t begin, int64_t end) {
    std::vector<char> accepted(n);
    std::vector<int64_t> depth(n), chain(n);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r * n;
      const int64_t d = accepted_chain(
          "verify_tree", par + o, n,
          [&](int64_t i, int64_t p) {
            return tpos[o + p] >= 0 && dpos[o + i] == tpos[o + p] && dtok[o + i] == ttok[o + p];
          },
          accepted, depth, chain);
      int64_t count = 0;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = t <= d ? tpos[o + chain[t]] : -1;
        if (pos >= 0) {
          TORCH_CHECK_VALUE(pos < width, "spot.verify_tree: target_pos must be < B");
          apos[o + t] = pos;
          atok[o + t] = ttok[o + chain[t]];
          blk[r * width + pos] = atok[o + t];
          ++count;
        } else {
          apos[o + t] = -1;
          atok[o + t] = -1;
        }
      }
      nacc[r] = count;
      last[r] = chain[d];
    }
  });
  return {accepted_pos, accepted_tokens, num_accepted, new_block, last_node};
}

// Whether node i's state is node p's successor: p's state with p's tokens written where p commits.
inline bool is_successor(const int64_t* state_i, const int64_t* state_p, const bool* commit_p, const int64_t* tokens_p,
                         int64_t width) {
  for (int64_t j = 0; j < width; ++j) {
    if (state_i[j] != (commit_p[j] ? tokens_p[j] : state_p[j])) return false;
  }
  return true;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> verify_steps_cpu(
    const at::Tensor& parents_in, const at::Tensor& states_in, const at::Tensor& commit_in,
    const at::Tensor& tokens_in) {
  TORCH_CHECK_VALUE(parents_in.dim() == 2 && parents_in.size(1) >= 1,
                    "spot.verify_steps: parents must be [b, N], N >= 1");
  TORCH_CHECK_VALUE(states_in.dim() == 3 && states_in.size(0) == parents_in.size(0) &&
                        states_in.size(1) == parents_in.size(1),
                    "spot.verify_steps: states must be [b, N, B]");
  TORCH_CHECK_VALUE(commit_in.sizes() == states_in.sizes() && tokens_in.sizes() == states_in.sizes(),
                    "spot.verify_steps: commit and tokens must have states' shape");
  TORCH_CHECK_TYPE(parents_in.scalar_type() == at::kLong && states_in.scalar_type() == at::kLong &&
                       tokens_in.scalar_type() == at::kLong && commit_in.scalar_type() == at::kBool,
                   "spot.verify_steps: parents, states and tokens must be int64, commit bool");
  const int64_t b = parents_in.size(0);
  const int64_t n = parents_in.size(1);
  const int64_t width = states_in.size(2);
  const auto opts = parents_in.options();
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
  const int64_t* par = parents.data_ptr<int64_t>();
  const int64_t* st = states.data_ptr<int64_t>();
  const bool* cm = commit.data_ptr<bool>();
  const int64_t* tk = tokens.data_ptr<int64_t>();
  int64_t* apos = accepted_pos.data_ptr<int64_t>();
  int64_t* nacc = num_accepted.data_ptr<int64_t>();
  int64_t* nsteps = num_steps.data_ptr<int64_t>();
  int64_t* blk = new_block.data_ptr<int64_t>();
  int64_t* last = last_node.data_ptr<int64_t>();

  parallel_rows(b, n * (width + 4), [&](int64_t begin, int64_t end) {
    std::vector<char> accepted(n), seen(width);
    std::vector<int64_t> depth(n), chain(n);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r * n;
      const int64_t* row_st = st + o * width;  // node i's slice: + i * width
      const bool* row_cm = cm + o * width;
      const int64_t* row_tk = tk + o * width;
      const int64_t d = accepted_chain(
          "verify_steps", par + o, n,
          [&](int64_t i, int64_t p) {
            return is_successor(row_st + i * width, row_st + p * width, row_cm + p * width, row_tk + p * width,
                                width);
          },
          accepted, depth, chain);
      const int64_t deepest = chain[d];
      // Step by step, each step's positions ascending; a position counts at the first step committing it.
      std::fill(seen.begin(), seen.end(), 0);
      int64_t count = 0;
      for (int64_t t = 0; t <= d; ++t) {
        const bool* c = row_cm + chain[t] * width;
        for (int64_t j = 0; j < width; ++j) {
          if (c[j] && !seen[j]) {
            seen[j] = 1;
            apos[r * width + count++] = j;
          }
        }
      }
      std::fill(apos + r * width + count, apos + (r + 1) * width, int64_t{-1});
      const int64_t* s_last = row_st + deepest * width;
      const bool* c_last = row_cm + deepest * width;
      const int64_t* t_last = row_tk + deepest * width;
      for (int64_t j = 0; j < width; ++j) blk[r * width + j] = c_last[j] ? t_last[j] : s_last[j];
      nacc[r] = count;
      nsteps[r] = d + 1;
      last[r] = deepest;
    }
  });
  return {accepted_pos, num_accepted, num_steps, new_block, last_node};
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) {
  m.impl("_verify_tree_cpu", &spot_cpu::verify_tree_cpu);
  m.impl("_verify_steps_cpu", &spot_cpu::verify_steps_cpu);
}
