// spot::_commit_rule_cpu: the positions one step of a commit rule commits at each node (docs/ops.md, "Commit rules";
// the oracle is spot_kernels/reference/commit_rule.py).
//
// Per node: the eligible positions (masked, confidence not NaN) sorted by confidence, descending, ties to the lower
// position (a total order, so std::sort is deterministic); `passing` counts the leading ranks whose confidence passes
// thresholds[n, rank] cast to the confidence dtype (round to nearest, as PyTorch compares a float32 tensor with a
// float64 value); the first min(max(quota[min(step, S - 1), n], passing), n) ranks commit. Nodes are independent
// and spread over threads.

#include <ATen/ops/zeros.h>

#include <vector>

#include "common.h"

namespace spot_cpu {
namespace {

struct Tables {
  const int64_t* quota;  // [S, B + 1], contiguous
  int64_t quota_rows;
  const double* thresholds;  // [B + 1, B], contiguous
  bool inclusive;
};

template <typename A>
void commit_nodes(const A* conf, const bool* masked, const int64_t* steps, const Tables& t, int64_t width,
                  int64_t begin, int64_t end, bool* out) {
  std::vector<int64_t> ranked;
  ranked.reserve(width);
  for (int64_t node = begin; node < end; ++node) {
    const A* c = conf + node * width;
    const bool* m = masked + node * width;
    ranked.clear();
    for (int64_t j = 0; j < width; ++j) {
      if (m[j] && !std::isnan(c[j])) ranked.push_back(j);
    }
    std::sort(ranked.begin(), ranked.end(),
              [c](int64_t a, int64_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
    const int64_t n = static_cast<int64_t>(ranked.size());
    const double* tau = t.thresholds + n * width;
    int64_t passing = 0;
    for (; passing < n; ++passing) {
      const A v = c[ranked[passing]];
      const A th = static_cast<A>(tau[passing]);
      if (!(t.inclusive ? v >= th : v > th)) break;
    }
    const int64_t step = std::min(std::max<int64_t>(steps[node], 0), t.quota_rows - 1);
    const int64_t quota = t.quota[step * (width + 1) + n];
    const int64_t commits = std::min(std::max(quota, passing), n);
    for (int64_t r = 0; r < commits; ++r) out[node * width + ranked[r]] = true;
  }
}

at::Tensor commit_rule_cpu(const at::Tensor& confidence_in, const at::Tensor& masked_in, const at::Tensor& steps_in,
                           const at::Tensor& quota_in, const at::Tensor& thresholds_in, bool inclusive) {
  const auto dtype = confidence_in.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kDouble,
                   "spot.commit_rule: confidence must be float32 or float64");
  TORCH_CHECK_VALUE(confidence_in.dim() >= 1, "spot.commit_rule: confidence must have shape [..., B]");
  const int64_t width = confidence_in.size(-1);
  const int64_t nodes = width > 0 ? confidence_in.numel() / width : 0;
  TORCH_CHECK_TYPE(masked_in.scalar_type() == at::kBool, "spot.commit_rule: masked must be bool");
  TORCH_CHECK_VALUE(masked_in.sizes() == confidence_in.sizes(),
                    "spot.commit_rule: masked must have confidence's shape");
  TORCH_CHECK_TYPE(steps_in.scalar_type() == at::kLong && quota_in.scalar_type() == at::kLong,
                   "spot.commit_rule: steps and quota must be int64");
  TORCH_CHECK_VALUE(steps_in.sizes() == confidence_in.sizes().slice(0, confidence_in.dim() - 1),
                    "spot.commit_rule: steps must have shape confidence.shape[:-1]");
  TORCH_CHECK_VALUE(quota_in.dim() == 2 && quota_in.size(0) >= 1 && quota_in.size(1) == width + 1,
                    "spot.commit_rule: quota must have shape [S, B + 1]");
  TORCH_CHECK_TYPE(thresholds_in.scalar_type() == at::kDouble, "spot.commit_rule: thresholds must be float64");
  TORCH_CHECK_VALUE(thresholds_in.dim() == 2 && thresholds_in.size(0) == width + 1 && thresholds_in.size(1) == width,
                    "spot.commit_rule: thresholds must have shape [B + 1, B]");
  at::Tensor out = at::zeros(masked_in.sizes(), masked_in.options());
  if (nodes == 0) return out;

  const at::Tensor conf = confidence_in.contiguous();
  const at::Tensor masked = masked_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const at::Tensor quota = quota_in.contiguous();
  const at::Tensor thresholds = thresholds_in.contiguous();
  const Tables t{quota.data_ptr<int64_t>(), quota.size(0), thresholds.data_ptr<double>(), inclusive};
  const bool* m = masked.data_ptr<bool>();
  const int64_t* s = steps.data_ptr<int64_t>();
  bool* o = out.data_ptr<bool>();
  // about B log B comparisons per node
  parallel_rows(nodes, width * 8, [&](int64_t begin, int64_t end) {
    if (dtype == at::kDouble) {
      commit_nodes(conf.data_ptr<double>(), m, s, t, width, begin, end, o);
    } else {
      commit_nodes(conf.data_ptr<float>(), m, s, t, width, begin, end, o);
    }
  });
  return out;
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_commit_rule_cpu", &spot_cpu::commit_rule_cpu); }
