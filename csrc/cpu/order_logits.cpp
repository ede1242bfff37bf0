// spot::_order_logits_cpu: the order drafter's whole forward for N draft nodes on the CPU (docs/ops.md, "Order
// drafter forward"; the oracle is spot_kernels/reference/order_logits.py).
//
// The reference's operations, in the same order on the same shapes, called from C++: one dispatcher entry from Python
// instead of about 100 (the drafter's Python modules, once per tree depth), and below autograd (a kernel under the
// CPU key needs no graph). From 48 rows on, the linears run through oneDNN where PyTorch has it
// (`mkldnn::_linear_pointwise`, the op torch.compile's CPU backend calls), the GELU and the residual adds fused into
// them: on this project's AMD EPYC, oneDNN's float32 GEMM ran the drafter's shapes about 1.9x faster than the MKL
// GEMM behind at::linear from 128 rows on, and ATen's GELU is a pass of its own (docs/round.md). Both sum float32
// products in their library's order, so the logits agree with the reference to float32 rounding (the op's tests
// hold the CPU kernel to the Triton kernel's bound), not bit for bit.
//
// Weights: one flat float32 tensor in the order of spot_kernels.ops.order_logits.weight_layout; the views below
// walk it in that order.

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string_view>

#include "common.h"

namespace spot_cpu {
namespace {

// Consecutive views of the packed weights, read in weight_layout order.
class WeightCursor {
 public:
  explicit WeightCursor(const at::Tensor& flat) : flat_(flat) {}
  at::Tensor next(at::IntArrayRef shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    TORCH_CHECK_VALUE(at_ + n <= flat_.size(0), "spot.order_logits: weights hold fewer values than the layout needs");
    at::Tensor view = flat_.narrow(0, at_, n).view(shape);
    at_ += n;
    return view;
  }
  int64_t used() const { return at_; }

 private:
  at::Tensor flat_;
  int64_t at_ = 0;
};

// y = act(x W^T + b) (+ residual): oneDNN's fused linear where PyTorch registers it, else at::linear. `gelu`: the
// exact (erf) GELU, as F.gelu.
class Linear {
 public:
  Linear() {
    auto& dispatcher = c10::Dispatcher::singleton();
    if (auto op = dispatcher.findOp({"mkldnn::_linear_pointwise", ""});
        op && op->hasKernelForDispatchKey(c10::DispatchKey::CPU))
      unary_ = op->typed<Unary>();
    if (auto op = dispatcher.findOp({"mkldnn::_linear_pointwise", "binary"});
        op && op->hasKernelForDispatchKey(c10::DispatchKey::CPU))
      binary_ = op->typed<Binary>();
  }

  at::Tensor operator()(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu = false) const {
    if (unary_ && wide(x))
      return unary_->call(x, w, b, gelu ? "gelu" : "none", c10::List<std::optional<at::Scalar>>(),
                          gelu ? std::optional<std::string_view>("none") : std::nullopt);
    const at::Tensor y = at::linear(x, w, b);
    return gelu ? at::gelu(y) : y;
  }

  // residual + x W^T + b
  at::Tensor add(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
    if (binary_ && wide(x)) return binary_->call(x, residual, w, b, "add");
    return residual + at::linear(x, w, b);
  }

 private:
  // Below 48 rows (one node of a 16- or 32-position block) MKL's GEMM was as fast or faster here (the order_logits
  // cases of bench/bench_cpu.py, timed against this kernel with oneDNN throughout): oneDNN pays off from a few
  // nodes on.
  static bool wide(const at::Tensor& x) { return x.numel() >= 48 * x.size(-1); }

  using Unary = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, std::string_view,
                           c10::List<std::optional<at::Scalar>>, std::optional<std::string_view>);
  using Binary = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            std::string_view);
  std::optional<c10::TypedOperatorHandle<Unary>> unary_;
  std::optional<c10::TypedOperatorHandle<Binary>> binary_;
};

at::Tensor order_logits_cpu(const at::Tensor& features, const at::Tensor& stale_masked,
                            const std::optional<at::Tensor>& tokens, const at::Tensor& node_row,
                            const at::Tensor& node_masked, const at::Tensor& depth,
                            const std::optional<at::Tensor>& resampled, const at::Tensor& weights, int64_t d_model,
                            int64_t n_layers, int64_t n_heads, int64_t d_ff, int64_t max_block, int64_t max_depth,
                            double scale) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;  // no autograd graph inside a kernel
  static const Linear linear;  // the operator lookup, once per process
  const int64_t n = node_masked.size(0);
  const int64_t block = node_masked.size(1);
  const int64_t n_inputs = features.size(2) + 3 + (resampled.has_value() ? 2 : 0);
  const int64_t head_dim = d_model / n_heads;
  WeightCursor w(weights);
  const at::Tensor inp_w = w.next({d_model, n_inputs}), inp_b = w.next({d_model});
  const at::Tensor pos_w = w.next({max_block, d_model}), rel_w = w.next({2 * max_block, d_model});
  const at::Tensor depth_w = w.next({max_depth, d_model});
  at::Tensor tok_w;
  if (tokens.has_value()) tok_w = w.next({d_model, tokens->size(2)});

  // node feature columns (reference.node_columns): masked now, committed along the path, fraction masked (, resampled)
  const at::Tensor stale_m = stale_masked.index_select(0, node_row);
  const at::Tensor just_committed = at::logical_and(stale_m, at::logical_not(node_masked));
  const at::Tensor masked_f = node_masked.to(at::kFloat);
  const at::Tensor frac = masked_f.mean(-1, /*keepdim=*/true).expand(node_masked.sizes());
  std::vector<at::Tensor> cols = {masked_f.unsqueeze(-1), just_committed.to(at::kFloat).unsqueeze(-1),
                                  frac.unsqueeze(-1)};
  if (resampled.has_value()) {
    // per row [R, B], or per row and depth [R, D, B]: each node's [N, B]
    const at::Tensor per_node = resampled->dim() == 2 ? resampled->index_select(0, node_row)
                                                      : resampled->index({node_row, depth});
    const at::Tensor r = per_node.to(at::kFloat).nan_to_num(0.0).clamp(0, 1);
    cols.push_back(r.unsqueeze(-1));
    cols.push_back(r.clamp_min(1e-6).log().unsqueeze(-1) / 14.0);
  }
  const at::Tensor feats = at::cat({features.index_select(0, node_row), at::cat(cols, -1)}, -1);
  at::Tensor x = linear(feats, inp_w, inp_b);

  const at::Tensor j = at::arange(block, node_row.options());
  const at::Tensor first =
      at::where(node_masked.any(1), node_masked.to(at::kChar).argmax(1), at::scalar_tensor(block, node_row.options()));
  const at::Tensor rel = (j.unsqueeze(0) - first.unsqueeze(1)).clamp(-max_block, max_block - 1) + max_block;
  x = x + at::embedding(pos_w, j).unsqueeze(0) + at::embedding(rel_w, rel) +
      at::embedding(depth_w, depth.clamp(0, max_depth - 1)).unsqueeze(1);
  if (tokens.has_value()) x = x + at::linear(tokens->index_select(0, node_row), tok_w);

  // Only the masked positions' logits are read: after the last layer's attention (which reads every position's keys
  // and values), the rest of the forward runs on the masked positions' rows alone, [M, d_model] (M = masked
  // positions over the N nodes): the same operations per row as over all N * B rows.
  const at::Tensor masked_rows = node_masked.reshape({-1}).nonzero().squeeze(1);
  const int64_t m = masked_rows.size(0);
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    const at::Tensor n1_w = w.next({d_model}), n1_b = w.next({d_model});
    const at::Tensor qkv_w = w.next({3 * d_model, d_model}), qkv_b = w.next({3 * d_model});
    const at::Tensor out_w = w.next({d_model, d_model}), out_b = w.next({d_model});
    const at::Tensor n2_w = w.next({d_model}), n2_b = w.next({d_model});
    const at::Tensor ff1_w = w.next({d_ff, d_model}), ff1_b = w.next({d_ff});
    const at::Tensor ff2_w = w.next({d_model, d_ff}), ff2_b = w.next({d_model});
    if (layer == n_layers - 1 && m == 0) break;  // no masked position: nothing left to compute
    at::Tensor h = at::layer_norm(x, {d_model}, n1_w, n1_b);
    const at::Tensor qkv = linear(h, qkv_w, qkv_b).view({n, block, 3, n_heads, head_dim}).permute({2, 0, 3, 1, 4});
    const at::Tensor a = at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]);  // bidirectional over the block
    at::Tensor mixed = a.transpose(1, 2).reshape({n * block, d_model});
    x = x.reshape({n * block, d_model});
    if (layer == n_layers - 1) {
      mixed = mixed.index_select(0, masked_rows);
      x = x.index_select(0, masked_rows);
    }
    x = linear.add(x, mixed, out_w, out_b);
    h = at::layer_norm(x, {d_model}, n2_w, n2_b);
    x = linear.add(x, linear(h, ff1_w, ff1_b, /*gelu=*/true), ff2_w, ff2_b);
    if (layer < n_layers - 1) x = x.view({n, block, d_model});
  }
  const at::Tensor norm_w = w.next({d_model}), norm_b = w.next({d_model});
  const at::Tensor head_w = w.next({1, d_model}), head_b = w.next({1});
  TORCH_CHECK_VALUE(w.used() == weights.size(0), "spot.order_logits: weights hold more values than the layout needs");
  at::Tensor out = at::full({n, block}, -std::numeric_limits<float>::infinity(), features.options());
  if (m == 0) return out;
  at::Tensor logits = at::linear(at::layer_norm(x, {d_model}, norm_w, norm_b), head_w, head_b).squeeze(-1);
  if (scale != 1.0) logits = logits.mul(scale);
  out.view({-1}).index_copy_(0, masked_rows, logits);
  return out;
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_order_logits_cpu", &spot_cpu::order_logits_cpu); }
