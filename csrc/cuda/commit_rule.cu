// spot::_commit_rule_cuda: the positions one step of a commit rule commits at each node (docs/ops.md, "Commit
// rules").
//
// One warp per node; lane l owns block positions l, l + 32, ... A warp sum gives n, the number of eligible positions
// (masked, confidence not NaN). Each eligible position's rank (confidence descending, ties to the lower position) is
// counted directly, O(B^2 / 32) per lane and node (B is a block size; the row stays in L1); a rank passes when its
// confidence passes thresholds[n, rank] cast to the confidence dtype (round to nearest, as PyTorch compares), and a
// warp minimum over the failing ranks gives `passing`, the number of leading ranks that pass. The first
// min(max(quota[min(step, S - 1), n], passing), n) ranks commit: a second counting pass writes them. Every input is
// read through its strides (no copies), one launch, no host synchronisation.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / 32;

struct Strided {  // a [nodes, B] view: element (node, j) at node * row + j * col
  int64_t row, col;
};

template <typename A>
struct Row {
  const A* conf;
  const bool* masked;
  int64_t conf_col, masked_col;

  __device__ __forceinline__ A value(int64_t j, bool& eligible) const {
    const A x = conf[j * conf_col];
    eligible = masked[j * masked_col] && x == x;
    return x;
  }
  // The rank of eligible position j (value x) among the eligible positions: those before it in the order.
  __device__ __forceinline__ int64_t rank(int64_t j, A x, int64_t width) const {
    int64_t r = 0;
    for (int64_t k = 0; k < width; ++k) {
      bool e;
      const A y = value(k, e);
      r += e && (y > x || (y == x && k < j));
    }
    return r;
  }
};

template <typename A>
__global__ void __launch_bounds__(kThreads)
    commit_rule_kernel(const A* __restrict__ confidence, Strided cs, const bool* __restrict__ masked, Strided ms,
                       const int64_t* __restrict__ steps, int64_t steps_stride, const int64_t* __restrict__ quota,
                       int64_t quota_rows, Strided qs, const double* __restrict__ thresholds, Strided ts,
                       bool inclusive, int64_t nodes, int64_t width, bool* __restrict__ out) {
  const int64_t node = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (node >= nodes) return;  // whole warps only: the shuffles below stay full-warp
  const int lane = threadIdx.x & 31;
  const Row<A> row{confidence + node * cs.row, masked + node * ms.row, cs.col, ms.col};

  int64_t n = 0;
  for (int64_t j = lane; j < width; j += 32) {
    bool e;
    row.value(j, e);
    n += e;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) n += shfl_xor(n, off);

  const double* tau = thresholds + n * ts.row;
  int64_t passing = n;  // the lowest failing rank
  for (int64_t j = lane; j < width; j += 32) {
    bool e;
    const A x = row.value(j, e);
    if (!e) continue;
    const int64_t r = row.rank(j, x, width);
    const A th = static_cast<A>(tau[r * ts.col]);
    if (!(inclusive ? x >= th : x > th)) passing = r < passing ? r : passing;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const int64_t o = shfl_xor(passing, off);
    passing = o < passing ? o : passing;
  }

  int64_t step = steps[node * steps_stride];
  step = step < 0 ? 0 : (step >= quota_rows ? quota_rows - 1 : step);
  const int64_t q = quota[step * qs.row + n * qs.col];
  const int64_t at_least = q > passing ? q : passing;
  const int64_t commits = at_least < n ? at_least : n;
  for (int64_t j = lane; j < width; j += 32) {
    bool e;
    const A x = row.value(j, e);
    out[node * width + j] = e && commits > 0 && row.rank(j, x, width) < commits;
  }
}

at::Tensor commit_rule_cuda(const at::Tensor& confidence_in, const at::Tensor& masked_in, const at::Tensor& steps_in,
                            const at::Tensor& quota, const at::Tensor& thresholds, bool inclusive) {
  const char* op = "commit_rule";
  const auto dtype = confidence_in.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kDouble, "spot.", op,
                   ": confidence must have dtype float32 or float64, got ", dtype_name(dtype));
  TORCH_CHECK_VALUE(confidence_in.dim() >= 1, "spot.", op, ": confidence must have at least 1 dimension");
  const int64_t width = confidence_in.size(-1);
  check_dtype(op, "masked", masked_in, at::kBool);
  check_shape(op, "masked", masked_in, confidence_in.sizes(), "confidence.shape");
  check_dtype(op, "steps", steps_in, at::kLong);
  check_shape(op, "steps", steps_in, confidence_in.sizes().slice(0, confidence_in.dim() - 1),
              "confidence.shape[:-1]");
  check_dtype(op, "quota", quota, at::kLong);
  TORCH_CHECK_VALUE(quota.dim() == 2 && quota.size(0) >= 1 && quota.size(1) == width + 1, "spot.", op,
                    ": quota must have shape [S, B + 1] with S >= 1 and B = ", width, " (from confidence), got ",
                    shape_str(quota.sizes()));
  check_dtype(op, "thresholds", thresholds, at::kDouble);
  check_shape(op, "thresholds", thresholds, {width + 1, width}, "[B + 1, B] from confidence");
  check_cuda(op, {{"confidence", &confidence_in}, {"masked", &masked_in}, {"steps", &steps_in}, {"quota", &quota},
                  {"thresholds", &thresholds}});
  c10::cuda::CUDAGuard guard(confidence_in.device());

  at::Tensor out = at::empty(masked_in.sizes(), masked_in.options());
  const int64_t nodes = width > 0 ? confidence_in.numel() / width : 0;
  if (nodes == 0) return out;
  // [nodes, B] rows: views where the leading dimensions merge (the usual case), else copies
  const at::Tensor conf = confidence_in.reshape({nodes, width});
  const at::Tensor masked = masked_in.reshape({nodes, width});
  const at::Tensor steps = steps_in.reshape({nodes});
  const Strided cs{conf.stride(0), conf.stride(1)}, ms{masked.stride(0), masked.stride(1)};
  const Strided qs{quota.stride(0), quota.stride(1)}, ts{thresholds.stride(0), thresholds.stride(1)};
  TORCH_CHECK_VALUE(ceil_div(nodes, kWarpsPerBlock) < (int64_t{1} << 31), "spot.", op,
                    " (cuda backend): too many nodes, got ", nodes);
  const auto grid = static_cast<unsigned>(ceil_div(nodes, kWarpsPerBlock));
  const auto stream = c10::cuda::getCurrentCUDAStream(confidence_in.device().index());
#define SPOT_COMMIT_RULE_LAUNCH(A)                                                                                    \
  do {                                                                                                                \
    auto kernel = commit_rule_kernel<A>;                                                                              \
    SPOT_LAUNCH(kernel, grid, kThreads, 0, stream, conf.data_ptr<A>(), cs, masked.data_ptr<bool>(), ms,               \
                steps.data_ptr<int64_t>(), steps.stride(0), quota.data_ptr<int64_t>(), quota.size(0), qs,             \
                thresholds.data_ptr<double>(), ts, inclusive, nodes, width, out.data_ptr<bool>());                    \
  } while (0)
  if (dtype == at::kDouble) {
    SPOT_COMMIT_RULE_LAUNCH(double);
  } else {
    SPOT_COMMIT_RULE_LAUNCH(float);
  }
#undef SPOT_COMMIT_RULE_LAUNCH
  SPOT_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_commit_rule_cuda", &spot_cuda::commit_rule_cuda); }
