// spot::_score_cuda: fused scoring (docs/ops.md, "Fused scoring").
//
// Rows are (node, block position) pairs of logits [..., B, V]. Nothing of size [rows, V] is ever materialised.
// A row's vocabulary is cut into `splits` chunks (splits > 1 only when there are too few rows to fill the GPU),
// and four kernels run on the current stream:
//
//   1. score_stats_kernel  grid (rows, splits): one pass over the chunk with x = logits / T (IEEE division, as the
//      reference): online softmax max / sum / sum e*(x - m) (entropy), the untempered softmax (raw_prob at T > 0),
//      the Gumbel-max key x + g(seed, row, pos, step, v) (T = 0: x) with its id (ties: lowest id), and the
//      invalid-row flag (NaN or +inf in x). The coupled noise is the reference's: the same u32 words, the same
//      float32 uniform, -log(-log(u)) in the compute dtype. An id whose x + max_gumbel cannot reach the best key
//      skips the hash and the two logs.
//   2. score_topk_kernel   grid (rows, splits): merges the row's split statistics, then a second pass computes
//      p_v = exp(x_v - m) / S, the probability the outputs report, and keeps per thread the best KP (p, id) pairs
//      in a sorted register list (ties: lowest id). Ranking by the computed p (not by x) is what makes ties in p
//      (for instance probabilities that underflow to 0) go to the lowest id as the reference's do. An x below the
//      threshold implied by the thread's current K-th probability skips the exp. Lists are merged per warp
//      (K rounds of a warp argmax) and per block, and the block's top entries are written to a workspace.
//   3. score_finalize_kernel grid (nodes): one warp per row merges the split lists into the top-K, picks the
//      token and its confidence; the block then reduces the node's masked, valid rows to commit_pos (ties:
//      lowest position).
//   Top-K is produced in rounds of 32: for K > 32, kernels 2 and 3 run again for ranks 32..63 and so on, each round
//   keeping only entries ranked after the previous round's last (p, id). K <= 32 (the decoder's case) is one round.
//
// Everything is stream ordered: no host synchronisation, no data-dependent launch, CUDA-graph capturable.

#include "common.cuh"

namespace spot_cuda {
namespace {

constexpr int kThreads = 256;               // stats and top-K kernels
constexpr int kWarps = kThreads / 32;
constexpr int kFinalizeThreads = 128;       // one block per node, one warp per row
constexpr int kFinalizeWarps = kFinalizeThreads / 32;
constexpr int kMaxSplits = 32;              // one lane per split in the merges
constexpr int kRound = 32;                  // top-K entries per round
constexpr int kMinChunk = 2048;             // vocabulary entries per split, at least
constexpr int kEmptyId = 0x7FFFFFFF;

enum Confidence : int { kProb = 0, kRawProb = 1, kMargin = 2, kNegEntropy = 3 };

template <typename A>
struct Stats {
  A m, s, t;  // softmax of x: running max, sum exp(x - m), sum exp(x - m) * (x - m)
  A mr, sr;   // softmax of the untempered logits (raw_prob at T > 0)
  A best;     // Gumbel-max key (T > 0) or x (T = 0), and its id
  int32_t best_id;
  int32_t bad;  // a NaN or +inf in x
};

template <typename A>
__device__ __forceinline__ Stats<A> empty_stats() {
  Stats<A> s;
  s.m = -inf_of<A>();
  s.s = A(0);
  s.t = A(0);
  s.mr = -inf_of<A>();
  s.sr = A(0);
  s.best = -inf_of<A>();
  s.best_id = kEmptyId;
  s.bad = 0;
  return s;
}

// (p, id) ranks before (q, jd): larger value first, then lower id.
template <typename A>
__device__ __forceinline__ bool before(A p, int id, A q, int jd) {
  return p > q || (p == q && id < jd);
}

// Add one finite x to a running (max, sum, entropy sum).
template <typename A>
__device__ __forceinline__ void softmax_push(A& m, A& s, A& t, A x) {
  if (x > m) {
    const A a = dexp(m - x);  // m = -inf: 0
    t = s > A(0) ? a * (t + (m - x) * s) : A(0);
    s = s * a + A(1);
    m = x;
  } else {
    const A d = x - m;
    const A e = dexp(d);
    s += e;
    t += e * d;
  }
}

template <typename A>
__device__ __forceinline__ void softmax_merge(A& m, A& s, A& t, A m2, A s2, A t2) {
  if (m2 == -inf_of<A>()) return;
  if (m == -inf_of<A>()) {
    m = m2;
    s = s2;
    t = t2;
    return;
  }
  const A big = m > m2 ? m : m2;
  const A a1 = dexp(m - big);
  const A a2 = dexp(m2 - big);
  t = a1 * (t + (m - big) * s) + a2 * (t2 + (m2 - big) * s2);
  s = s * a1 + s2 * a2;
  m = big;
}

template <typename A>
__device__ __forceinline__ void combine(Stats<A>& a, const Stats<A>& b) {
  softmax_merge(a.m, a.s, a.t, b.m, b.s, b.t);
  A unused = A(0);
  softmax_merge(a.mr, a.sr, unused, b.mr, b.sr, A(0));
  if (before(b.best, b.best_id, a.best, a.best_id)) {
    a.best = b.best;
    a.best_id = b.best_id;
  }
  a.bad |= b.bad;
}

template <typename A>
__device__ __forceinline__ Stats<A> shfl_down_stats(const Stats<A>& a, int off) {
  Stats<A> b;
  b.m = __shfl_down_sync(kFullMask, a.m, off);
  b.s = __shfl_down_sync(kFullMask, a.s, off);
  b.t = __shfl_down_sync(kFullMask, a.t, off);
  b.mr = __shfl_down_sync(kFullMask, a.mr, off);
  b.sr = __shfl_down_sync(kFullMask, a.sr, off);
  b.best = __shfl_down_sync(kFullMask, a.best, off);
  b.best_id = __shfl_down_sync(kFullMask, a.best_id, off);
  b.bad = __shfl_down_sync(kFullMask, a.bad, off);
  return b;
}

template <typename A>
__device__ __forceinline__ Stats<A> shfl_stats(const Stats<A>& a, int src) {
  Stats<A> b;
  b.m = shfl(a.m, src);
  b.s = shfl(a.s, src);
  b.t = shfl(a.t, src);
  b.mr = shfl(a.mr, src);
  b.sr = shfl(a.sr, src);
  b.best = shfl(a.best, src);
  b.best_id = shfl(a.best_id, src);
  b.bad = shfl(a.bad, src);
  return b;
}

// Tree reduction of a warp's statistics in a fixed order; lane 0's result is returned to every lane, so every
// block that merges the same row's splits gets bit-identical values.
template <typename A>
__device__ __forceinline__ Stats<A> warp_reduce_stats(Stats<A> a) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const Stats<A> b = shfl_down_stats(a, off);
    if ((threadIdx.x & 31) + off < 32) combine(a, b);
  }
  return shfl_stats(a, 0);
}

// The merged statistics of a row, from its `splits` partial statistics (called by a whole warp).
template <typename A>
__device__ __forceinline__ Stats<A> row_stats(const Stats<A>* __restrict__ part, int splits) {
  const int lane = threadIdx.x & 31;
  return warp_reduce_stats(lane < splits ? part[lane] : empty_stats<A>());
}

template <typename A>
__device__ __forceinline__ bool valid_row(const Stats<A>& st) {
  return !st.bad && st.m > -inf_of<A>();
}

template <In I>
__device__ __forceinline__ typename InTraits<I>::acc scaled(typename InTraits<I>::acc raw, bool tempered,
                                                            typename InTraits<I>::acc temperature) {
  return tempered ? raw / temperature : raw;  // IEEE division (never a reciprocal multiply), as specified
}

// The pass over a row's vocabulary chunk [v0, v1) shared by kernels 1 and 2: this thread's entries
// v = v0 + threadIdx.x + i * kThreads in increasing order, body(v, raw logit in the compute dtype) for each, with the
// loads issued kUnroll entries ahead of their use.
template <In I, typename Body>
__device__ __forceinline__ void for_each_logit(const typename InTraits<I>::storage* __restrict__ x_row, int64_t v0,
                                               int64_t v1, Body&& body) {
  using A = typename InTraits<I>::acc;
  constexpr int kUnroll = 4;
  for (int64_t base = v0 + threadIdx.x; base < v1; base += kUnroll * kThreads) {
    A raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * kThreads;
      raw[u] = v < v1 ? load_as_acc<I>(x_row, v) : A(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * kThreads;
      if (v >= v1) break;
      body(v, raw[u]);
    }
  }
}

// ---------------------------------------------------------------------------------------------- kernel 1
template <In I, bool NOISE>
__global__ void __launch_bounds__(kThreads)
    score_stats_kernel(const typename InTraits<I>::storage* __restrict__ logits, int64_t vocab, int64_t block,
                       int64_t chunk, const int64_t* __restrict__ rows, const int64_t* __restrict__ block_start,
                       const int64_t* __restrict__ steps, uint32_t skey, typename InTraits<I>::acc temperature,
                       typename InTraits<I>::acc max_gumbel, bool want_raw, Stats<typename InTraits<I>::acc>* part) {
  using A = typename InTraits<I>::acc;
  const int64_t row = blockIdx.x;
  const int splits = gridDim.y;
  const int64_t v0 = blockIdx.y * chunk;
  const int64_t v1 = v0 + chunk < vocab ? v0 + chunk : vocab;
  const auto* x_row = logits + row * vocab;

  uint32_t key = 0;
  if (NOISE) {
    const int64_t node = row / block;
    const int64_t j = row - node * block;
    key = row_key(skey, rows[node], block_start[node] + j, steps[node]);
  }

  Stats<A> st = empty_stats<A>();
  for_each_logit<I>(x_row, v0, v1, [&](int64_t v, A raw) {
    const A x = scaled<I>(raw, NOISE, temperature);
    if (!(x < inf_of<A>())) {  // NaN or +inf: the row is invalid
      st.bad = 1;
      return;
    }
    if (want_raw && raw > -inf_of<A>()) {
      A unused = A(0);
      softmax_push(st.mr, st.sr, unused, raw);
    }
    if (x == -inf_of<A>()) return;  // probability 0; never the token of a valid row
    softmax_push(st.m, st.s, st.t, x);
    A k;
    if (NOISE) {
      if (x + max_gumbel < st.best) return;  // even the largest Gumbel value cannot reach the best key
      k = x + gumbel_from_word<A>(noise_word(key, v));
    } else {
      k = x;
    }
    if (k > st.best) {  // strict: this thread visits ids in increasing order, so ties keep the lowest id
      st.best = k;
      st.best_id = static_cast<int32_t>(v);
    }
  });

  __shared__ Stats<A> warp_stats[kWarps];
  st = warp_reduce_stats(st);
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) warp_stats[warp] = st;
  __syncthreads();
  if (warp == 0) {
    st = warp_reduce_stats((threadIdx.x < kWarps) ? warp_stats[threadIdx.x] : empty_stats<A>());
    if (threadIdx.x == 0) part[row * splits + blockIdx.y] = st;
  }
}

// ---------------------------------------------------------------------------------------------- kernel 2
// A thread's best KP (p, id) pairs, sorted (p descending, id ascending), in registers (all indices static).
template <typename A, int KP>
struct TopList {
  A p[KP];
  int id[KP];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < KP; ++i) {
      p[i] = A(-1);
      id[i] = kEmptyId;
    }
  }
  // Insert (q, v) where q > p[KP - 1]; v is larger than every id already held, so equal p stay in front.
  __device__ __forceinline__ void insert(A q, int v) {
#pragma unroll
    for (int i = KP - 1; i >= 0; --i) {
      if (i > 0 && q > p[i - 1]) {
        p[i] = p[i - 1];
        id[i] = id[i - 1];
      } else if (q > p[i]) {
        p[i] = q;
        id[i] = v;
      }
    }
  }
  __device__ __forceinline__ void pop_front() {
#pragma unroll
    for (int i = 0; i + 1 < KP; ++i) {
      p[i] = p[i + 1];
      id[i] = id[i + 1];
    }
    p[KP - 1] = A(-1);
    id[KP - 1] = kEmptyId;
  }
};

// Warp-wide argmax of (p desc, id asc, lane asc): a strict total order, so every lane ends with the same winner.
template <typename A>
__device__ __forceinline__ void warp_best(A& p, int& id, int& lane) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const A op = shfl_xor(p, off);
    const int oid = shfl_xor(id, off);
    const int olane = shfl_xor(lane, off);
    if (op > p || (op == p && (oid < id || (oid == id && olane < lane)))) {
      p = op;
      id = oid;
      lane = olane;
    }
  }
}

// x below this cannot give a probability above `tail` (the thread's current K-th): x - m < log(tail * S) - delta
// with a margin far above the rounding of fl(x - m), exp and the division. Only used in the normal range.
template <typename A>
__device__ __forceinline__ A skip_threshold(A tail, A m, A log_sum) {
  const A tiny = sizeof(A) == 4 ? A(1e-30) : A(1e-300);
  if (!(tail >= tiny)) return -inf_of<A>();
  const A lt = dlog(tail) + log_sum;
  return m + lt - (A(1e-3) + A(1e-6) * fabs(lt));
}

template <In I, int KP>
__global__ void __launch_bounds__(kThreads)
    score_topk_kernel(const typename InTraits<I>::storage* __restrict__ logits, int64_t vocab, int64_t chunk,
                      bool tempered, typename InTraits<I>::acc temperature,
                      const Stats<typename InTraits<I>::acc>* __restrict__ part, int round, int width,
                      const typename InTraits<I>::acc* __restrict__ bound_p, const int32_t* __restrict__ bound_id,
                      typename InTraits<I>::acc* __restrict__ list_p, int32_t* __restrict__ list_id) {
  using A = typename InTraits<I>::acc;
  const int64_t row = blockIdx.x;
  const int splits = gridDim.y;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;

  __shared__ A s_m, s_sum, s_logsum;
  __shared__ int s_valid;
  __shared__ A s_p[kWarps][kRound];
  __shared__ int s_id[kWarps][kRound];
  if (warp == 0) {
    const Stats<A> st = row_stats(part + row * splits, splits);
    if (lane == 0) {
      s_m = st.m;
      s_sum = st.s;
      s_logsum = valid_row(st) ? dlog(st.s) : A(0);
      s_valid = valid_row(st);
    }
  }
  __syncthreads();
  if (!s_valid) return;  // invalid rows: the finalize kernel writes their outputs without reading lists
  const A m = s_m, sum = s_sum, log_sum = s_logsum;
  const bool filtered = round > 0;
  const A bp = filtered ? bound_p[row] : A(0);
  const int bi = filtered ? bound_id[row] : 0;

  const int64_t v0 = blockIdx.y * chunk;
  const int64_t v1 = v0 + chunk < vocab ? v0 + chunk : vocab;
  const auto* x_row = logits + row * vocab;
  TopList<A, KP> top;
  top.init();
  A threshold = -inf_of<A>();
  for_each_logit<I>(x_row, v0, v1, [&](int64_t v, A raw) {
    const A x = scaled<I>(raw, tempered, temperature);
    if (x < threshold) return;
    const A p = dexp(x - m) / sum;  // x = -inf: 0, an ordinary entry
    if (filtered && !(p < bp || (p == bp && v > bi))) return;  // ranked in an earlier round
    if (p > top.p[KP - 1]) {
      top.insert(p, static_cast<int>(v));
      threshold = skip_threshold(top.p[KP - 1], m, log_sum);
    }
  });

  // Warp merge: `width` rounds of a warp argmax over the lanes' list heads.
  for (int r = 0; r < width; ++r) {
    A p = top.p[0];
    int id = top.id[0];
    int who = lane;
    warp_best(p, id, who);
    if (lane == who) top.pop_front();
    if (lane == 0) {
      s_p[warp][r] = p;
      s_id[warp][r] = id;
    }
  }
  __syncthreads();
  // Block merge by warp 0: lane w walks warp w's sorted list.
  if (warp == 0) {
    int ptr = 0;
    A* out_p = list_p + (row * splits + blockIdx.y) * kRound;
    int32_t* out_id = list_id + (row * splits + blockIdx.y) * kRound;
    for (int r = 0; r < width; ++r) {
      A p = A(-1);
      int id = kEmptyId;
      if (lane < kWarps && ptr < width) {
        p = s_p[lane][ptr];
        id = s_id[lane][ptr];
      }
      int who = lane;
      warp_best(p, id, who);
      if (lane == who) ++ptr;
      if (lane == 0) {
        out_p[r] = p;
        out_id[r] = id;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------- kernel 3
template <In I>
__global__ void __launch_bounds__(kFinalizeThreads)
    score_finalize_kernel(const typename InTraits<I>::storage* __restrict__ logits, const bool* __restrict__ masked,
                          int64_t vocab, int64_t block, int64_t top_k, bool tempered,
                          typename InTraits<I>::acc temperature, int confidence,
                          const Stats<typename InTraits<I>::acc>* __restrict__ part, int splits, int round,
                          int width, int out_width, const typename InTraits<I>::acc* __restrict__ list_p,
                          const int32_t* __restrict__ list_id, typename InTraits<I>::acc* __restrict__ bound_p,
                          int32_t* __restrict__ bound_id, int64_t* __restrict__ tokens,
                          typename InTraits<I>::acc* __restrict__ conf, typename InTraits<I>::acc* __restrict__ topk_p,
                          int64_t* __restrict__ topk_id, int64_t* __restrict__ commit) {
  using A = typename InTraits<I>::acc;
  const int64_t node = blockIdx.x;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t col0 = static_cast<int64_t>(round) * kRound;

  A best_conf = -inf_of<A>();
  int64_t best_pos = -1;
  for (int64_t j = warp; j < block; j += kFinalizeWarps) {
    const int64_t row = node * block + j;
    A* row_p = topk_p + row * top_k;
    int64_t* row_id = topk_id + row * top_k;
    const Stats<A> st = row_stats(part + row * splits, splits);
    const bool valid = valid_row(st);
    if (!valid) {
      if (round == 0) {
        if (lane == 0) {
          tokens[row] = -1;
          conf[row] = std::numeric_limits<A>::quiet_NaN();
        }
        for (int64_t c = lane; c < top_k; c += 32) {
          row_p[c] = A(0);
          row_id[c] = -1;
        }
      }
      continue;
    }
    // Merge the split lists: lane s walks split s's sorted list.
    int ptr = 0;
    A p1 = A(-1), p2 = A(-1), last_p = A(-1);
    int last_id = kEmptyId;
    const A* lp = list_p + (row * splits + lane) * kRound;
    const int32_t* li = list_id + (row * splits + lane) * kRound;
    for (int r = 0; r < width; ++r) {
      A p = A(-1);
      int id = kEmptyId;
      if (lane < splits && ptr < width) {
        p = lp[ptr];
        id = li[ptr];
      }
      int who = lane;
      warp_best(p, id, who);
      if (lane == who) ++ptr;
      if (r == 0) p1 = p;
      if (r == 1) p2 = p;
      if (r < out_width) {
        last_p = p;
        last_id = id;
        if (lane == 0) {
          const bool real = p >= A(0);
          row_p[col0 + r] = real ? p : A(0);
          row_id[col0 + r] = real ? id : -1;
        }
      }
    }
    if (bound_p != nullptr && lane == 0) {
      bound_p[row] = last_p;
      bound_id[row] = last_id;
    }
    if (round != 0) continue;
    for (int64_t c = out_width + lane; c < top_k; c += 32) {  // later rounds overwrite; K > V stays padding
      row_p[c] = A(0);
      row_id[c] = -1;
    }
    const int64_t token = st.best_id;
    A c;
    if (confidence == kNegEntropy) {
      c = st.t / st.s - dlog(st.s);
    } else if (confidence == kMargin) {
      c = (p1 > A(0) ? p1 : A(0)) - (p2 > A(0) ? p2 : A(0));
    } else {
      const A raw = load_as_acc<I>(logits + row * vocab, token);
      if (confidence == kRawProb && tempered) {
        c = dexp(raw - st.mr) / st.sr;
      } else {
        c = dexp(scaled<I>(raw, tempered, temperature) - st.m) / st.s;
      }
    }
    if (lane == 0) {
      tokens[row] = token;
      conf[row] = c;
    }
    if (masked[row] && (c > best_conf || best_pos < 0)) {  // rows come in increasing j: ties keep the lowest
      best_conf = c;
      best_pos = j;
    }
  }
  if (round != 0) return;
  __shared__ A s_conf[kFinalizeWarps];
  __shared__ int64_t s_pos[kFinalizeWarps];
  if (lane == 0) {
    s_conf[warp] = best_conf;
    s_pos[warp] = best_pos;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    A bc = -inf_of<A>();
    int64_t bp = -1;
    for (int w = 0; w < kFinalizeWarps; ++w) {
      if (s_pos[w] < 0) continue;
      if (bp < 0 || s_conf[w] > bc || (s_conf[w] == bc && s_pos[w] < bp)) {
        bc = s_conf[w];
        bp = s_pos[w];
      }
    }
    commit[node] = bp;
  }
}

// ---------------------------------------------------------------------------------------------- host side
int confidence_kind(c10::string_view name) {
  if (name == "prob") return kProb;
  if (name == "raw_prob") return kRawProb;
  if (name == "margin") return kMargin;
  if (name == "neg_entropy") return kNegEntropy;
  TORCH_CHECK_VALUE(false, "spot.score: confidence must be one of ('prob', 'raw_prob', 'margin', 'neg_entropy'), "
                    "got '", std::string(name), "'");
  return -1;
}

struct ScoreOut {
  at::Tensor tokens, conf, topk_p, topk_id, commit;
};

template <In I>
void launch_score(const at::Tensor& logits, const at::Tensor& masked, uint32_t skey, const at::Tensor& rows,
                  const at::Tensor& block_start, const at::Tensor& steps, double temperature, int confidence,
                  int64_t top_k, int64_t nodes, int64_t block, int64_t vocab, ScoreOut& out) {
  using A = typename InTraits<I>::acc;
  using S = typename InTraits<I>::storage;
  const int device = logits.device().index();
  const auto stream = c10::cuda::getCurrentCUDAStream(device);
  const int64_t n_rows = nodes * block;
  const bool tempered = temperature > 0;
  const A temp = static_cast<A>(temperature);  // rounded to the compute dtype, as the reference's full((), T)
  // The largest Gumbel value any word can give (u = 1 - 2^-24), with a margin over the device log's rounding.
  const A max_gumbel = static_cast<A>(-std::log(-std::log(1.0 - std::ldexp(1.0, -24))) + 1e-3);

  const auto* x = reinterpret_cast<const S*>(logits.const_data_ptr());
  auto* tokens = out.tokens.data_ptr<int64_t>();
  auto* conf = out.conf.data_ptr<A>();
  auto* topk_p = out.topk_p.data_ptr<A>();
  auto* topk_id = out.topk_id.data_ptr<int64_t>();
  auto* commit = out.commit.data_ptr<int64_t>();
  auto finalize = score_finalize_kernel<I>;

  if (n_rows == 0) {  // B = 0 (nodes > 0): no position to commit
    SPOT_LAUNCH(finalize, static_cast<unsigned>(nodes), kFinalizeThreads, 0, stream, x, masked.data_ptr<bool>(),
                vocab, block, top_k, tempered, temp, confidence, nullptr, 1, 0, 0, 0, nullptr, nullptr, nullptr,
                nullptr, tokens, conf, topk_p, topk_id, commit);
    SPOT_LAUNCH_CHECK();
    return;
  }

  // Split the vocabulary only when the rows alone cannot fill the GPU.
  const int64_t target_blocks = static_cast<int64_t>(sm_count(device)) * 4;
  int64_t splits = n_rows >= target_blocks ? 1 : ceil_div(target_blocks, n_rows);
  splits = std::min<int64_t>({splits, kMaxSplits, ceil_div(vocab, kMinChunk)});
  splits = std::max<int64_t>(splits, 1);
  const int64_t chunk = ceil_div(ceil_div(vocab, splits), 32) * 32;
  splits = ceil_div(vocab, chunk);

  const int64_t keff = std::min(top_k, vocab);
  const int64_t rounds = ceil_div(keff, kRound);
  const int first_width = static_cast<int>(std::min<int64_t>(keff, kRound));
  // Round 0 lists hold at least 2 entries for "margin" (top-1 minus top-2, whatever K).
  const int list_width0 = std::max(first_width, confidence == kMargin ? 2 : 1);

  auto bytes = logits.options().dtype(at::kByte);
  at::Tensor part = at::empty({n_rows * splits * static_cast<int64_t>(sizeof(Stats<A>))}, bytes);
  auto* stats = reinterpret_cast<Stats<A>*>(part.data_ptr());
  at::Tensor lp = at::empty({n_rows * splits * kRound}, logits.options().dtype(out.conf.scalar_type()));
  at::Tensor li = at::empty({n_rows * splits * kRound}, logits.options().dtype(at::kInt));
  at::Tensor bp, bi;
  if (rounds > 1) {
    bp = at::empty({n_rows}, lp.options());
    bi = at::empty({n_rows}, li.options());
  }

  const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(splits));
  const int64_t* r = rows.data_ptr<int64_t>();
  const int64_t* b = block_start.data_ptr<int64_t>();
  const int64_t* s = steps.data_ptr<int64_t>();
  const bool want_raw = confidence == kRawProb && tempered;
  auto stats_kernel = tempered ? score_stats_kernel<I, true> : score_stats_kernel<I, false>;
  SPOT_LAUNCH(stats_kernel, grid, kThreads, 0, stream, x, vocab, block, chunk, r, b, s, skey, temp, max_gumbel,
              want_raw, stats);
  SPOT_LAUNCH_CHECK();

  A* bound_p = rounds > 1 ? bp.data_ptr<A>() : nullptr;
  int32_t* bound_id = rounds > 1 ? bi.data_ptr<int32_t>() : nullptr;
  for (int64_t round = 0; round < rounds; ++round) {
    const int out_width = static_cast<int>(std::min<int64_t>(keff - round * kRound, kRound));
    const int width = round == 0 ? list_width0 : out_width;
    auto topk_kernel = width <= 8 ? score_topk_kernel<I, 8> : score_topk_kernel<I, 32>;
    SPOT_LAUNCH(topk_kernel, grid, kThreads, 0, stream, x, vocab, chunk, tempered, temp, stats,
                static_cast<int>(round), width, bound_p, bound_id, lp.data_ptr<A>(), li.data_ptr<int32_t>());
    SPOT_LAUNCH_CHECK();
    SPOT_LAUNCH(finalize, static_cast<unsigned>(nodes), kFinalizeThreads, 0, stream, x, masked.data_ptr<bool>(),
                vocab, block, top_k, tempered, temp, confidence, stats, static_cast<int>(splits),
                static_cast<int>(round), width, out_width, lp.data_ptr<A>(), li.data_ptr<int32_t>(),
                round + 1 < rounds ? bound_p : nullptr, bound_id, tokens, conf, topk_p, topk_id, commit);
    SPOT_LAUNCH_CHECK();
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> score_cuda(
    const at::Tensor& logits_in, const at::Tensor& masked_in, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, c10::string_view confidence,
    int64_t top_k) {
  const char* op = "score";
  const auto dt = logits_in.scalar_type();
  TORCH_CHECK_TYPE(dt == at::kHalf || dt == at::kBFloat16 || dt == at::kFloat || dt == at::kDouble, "spot.score: ",
                   "logits must have dtype float16/bfloat16/float32/float64, got ", dtype_name(dt));
  TORCH_CHECK_VALUE(logits_in.dim() >= 2, "spot.score: logits must have at least 2 dimensions, got shape ",
                    shape_str(logits_in.sizes()));
  const int64_t vocab = logits_in.size(-1);
  TORCH_CHECK_VALUE(vocab >= 1, "spot.score: logits must have a vocabulary dimension V >= 1, got shape ",
                    shape_str(logits_in.sizes()));
  TORCH_CHECK_VALUE(vocab < (int64_t{1} << 31), "spot.score (cuda backend): V must be < 2^31, got ", vocab);
  const auto lead = logits_in.sizes().slice(0, logits_in.dim() - 2);
  check_dtype(op, "masked", masked_in, at::kBool);
  check_shape(op, "masked", masked_in, logits_in.sizes().slice(0, logits_in.dim() - 1), "logits.shape[:-1]");
  check_dtype(op, "rows", rows_in, at::kLong);
  check_shape(op, "rows", rows_in, lead, "logits.shape[:-2]; use .expand() to broadcast");
  check_dtype(op, "block_start", block_start_in, at::kLong);
  check_shape(op, "block_start", block_start_in, lead, "logits.shape[:-2]; use .expand() to broadcast");
  check_dtype(op, "steps", steps_in, at::kLong);
  check_shape(op, "steps", steps_in, lead, "logits.shape[:-2]; use .expand() to broadcast");
  check_seed(op, seed);
  check_temperature(op, temperature);
  const int kind = confidence_kind(confidence);
  TORCH_CHECK_VALUE(top_k >= 1, "spot.score: top_k must lie in [1, inf), got ", top_k);
  check_cuda(op, {{"logits", &logits_in}, {"masked", &masked_in}, {"rows", &rows_in},
                  {"block_start", &block_start_in}, {"steps", &steps_in}});
  c10::cuda::CUDAGuard guard(logits_in.device());

  const int64_t block = logits_in.size(-2);
  int64_t nodes = 1;
  for (auto d : lead) nodes *= d;
  TORCH_CHECK_VALUE(nodes < (int64_t{1} << 31) && nodes * std::max<int64_t>(block, 1) < (int64_t{1} << 31),
                    "spot.score (cuda backend): too many rows (", nodes, " x ", block, ")");
  const auto cdtype = dt == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<int64_t> lead_b(logits_in.sizes().begin(), logits_in.sizes().end() - 1);
  std::vector<int64_t> lead_bk = lead_b;
  lead_bk.push_back(top_k);
  const auto opts = logits_in.options();
  ScoreOut out{at::empty(lead_b, opts.dtype(at::kLong)), at::empty(lead_b, opts.dtype(cdtype)),
               at::empty(lead_bk, opts.dtype(cdtype)), at::empty(lead_bk, opts.dtype(at::kLong)),
               at::empty(lead, opts.dtype(at::kLong))};
  if (nodes == 0) return {out.tokens, out.conf, out.topk_p, out.topk_id, out.commit};

  const at::Tensor logits = logits_in.contiguous();
  const at::Tensor masked = masked_in.contiguous();
  const at::Tensor rows = rows_in.contiguous();
  const at::Tensor block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const uint32_t skey = seed_key(seed);
  switch (dt) {
    case at::kHalf:
      launch_score<In::kF16>(logits, masked, skey, rows, block_start, steps, temperature, kind, top_k, nodes, block,
                             vocab, out);
      break;
    case at::kBFloat16:
      launch_score<In::kBF16>(logits, masked, skey, rows, block_start, steps, temperature, kind, top_k, nodes,
                              block, vocab, out);
      break;
    case at::kFloat:
      launch_score<In::kF32>(logits, masked, skey, rows, block_start, steps, temperature, kind, top_k, nodes, block,
                             vocab, out);
      break;
    default:
      launch_score<In::kF64>(logits, masked, skey, rows, block_start, steps, temperature, kind, top_k, nodes, block,
                             vocab, out);
  }
  return {out.tokens, out.conf, out.topk_p, out.topk_id, out.commit};
}

}  // namespace
}  // namespace spot_cuda

TORCH_LIBRARY_IMPL(SPOT_NS, SPOT_KEY, m) { m.impl("_score_cuda", &spot_cuda::score_cuda); }
