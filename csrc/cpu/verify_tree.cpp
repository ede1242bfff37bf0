// spot::_verify_tree_cpu: parallel tree verification (docs/ops.md, "Parallel verification"; the oracle is
// spot_kernels/reference/verify.py).
//
// Parents precede children (parents[i] < i, checked by the router), so one pass in node order decides acceptance
// and depth: node i > 0 is accepted iff its parent is accepted and its drafted commit is the parent's own target
// commit. The deepest accepted node (ties: lowest index) is walked back to the root to list the commits. Batch rows
// are independent and spread over threads.

#include <ATen/ops/empty.h>

#include <tuple>
#include <vector>

#include "common.h"

namespace spot_cpu {
namespace {

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
      accepted[0] = 1;
      depth[0] = 0;
      int64_t deepest = 0;
      for (int64_t i = 1; i < n; ++i) {
        const int64_t p = par[o + i];
        TORCH_CHECK_VALUE(p < i, "spot.verify_tree: parents must precede children");
        accepted[i] = p >= 0 && accepted[p] && tpos[o + p] >= 0 && dpos[o + i] == tpos[o + p] &&
                      dtok[o + i] == ttok[o + p];
        if (!accepted[i]) continue;
        depth[i] = depth[p] + 1;
        if (depth[i] > depth[deepest]) deepest = i;  // strict: ties keep the lowest index
      }
      // chain[t] = the ancestor of `deepest` at depth t.
      const int64_t d = depth[deepest];
      for (int64_t node = deepest, t = d; t >= 0; --t) {
        chain[t] = node;
        node = t > 0 ? par[o + node] : node;
      }
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
      last[r] = deepest;
    }
  });
  return {accepted_pos, accepted_tokens, num_accepted, new_block, last_node};
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_verify_tree_cpu", &spot_cpu::verify_tree_cpu); }
