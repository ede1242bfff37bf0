// spot::_score_cpu: fused scoring on the CPU (docs/ops.md, "Fused scoring"; the oracle is
// spot_kernels/reference/scoring.py).
//
// One (node, position) row at a time, rows spread over threads with at::parallel_for. Per row, x = logits.to(cdtype)
// / T (IEEE division, as the reference; T = 0: x = logits.to(cdtype)) is copied into a thread-local buffer padded
// with -inf to a multiple of 16, then:
//   1. max and validity (a NaN or +inf in x, or every entry -inf: invalid), vectorised per chunk; the first argmax
//      (the T = 0 token) is searched in the first chunk reaching the maximum;
//   2. the softmax denominator S = sum exp(x - max) (and sum e * (x - max) for "neg_entropy") with a branch-free
//      float exp that vectorises; chunk sums are added in double;
//   3. T > 0: the coupled Gumbel-max. The running best key starts at x[argmax] + g(argmax); a chunk is skipped when
//      no x + G_MAX reaches the best key (G_MAX: the largest Gumbel value the hash can produce), otherwise its noise
//      words are hashed (vectorised) and the two logs are taken only where x + gumbel_upper(word) reaches it, a
//      log-free upper bound from the word's bits. Rounding is monotone, so every skip is exact: the token is the
//      dense argmax of x + g with the reference's noise words, ties to the lowest id;
//   4. the top-K of p = exp(x - max) / S (std::exp), ranked by the computed p (ties: lowest id, like the
//      reference's), keeping a sorted list and skipping the exp for x below the value that could enter it (for K
//      above 64, selecting the K-th largest x first and sorting the entries that reach its p);
//   5. the confidence, then per node the commit position.
// The row function is built once per SIMD level and called at the process's level (csrc/cpu/simd.h). Probabilities
// agree with the reference's to float rounding at every level (tolerance in tests/helpers.py, PROB_TOL); tokens, top-K
// ids and commit positions are equal.

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>

#include <cstring>
#include <functional>
#include <utility>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"

namespace spot_cpu {
namespace {

enum Confidence : int { kProb = 0, kRawProb = 1, kMargin = 2, kNegEntropy = 3 };

int confidence_kind(c10::string_view c) {
  if (c == "prob") return kProb;
  if (c == "raw_prob") return kRawProb;
  if (c == "margin") return kMargin;
  if (c == "neg_entropy") return kNegEntropy;
  TORCH_CHECK_VALUE(false, "spot.score: confidence must be one of ('prob', 'raw_prob', 'margin', 'neg_entropy'), got '",
                    std::string(c), "'");
  return kProb;
}

constexpr int64_t kLanes = 16;    // chunk width of the pre-tested loops (x is padded to a multiple of it)
constexpr int64_t kMaxChunk = 64;  // max / argmax chunk
constexpr int64_t kChunk = 1024;  // softmax-sum chunk: summed in the compute dtype, chunks added in double

// The largest Gumbel value the hash can produce (u = 1 - 2^-24), plus slack for an ulp of log rounding.
template <typename A>
SPOT_SIMD_INLINE A gumbel_max() {
  static const A g = gumbel_from_word<A>(0xFFFFFFFFu) + A(1e-3);
  return g;
}

// An upper bound of the Gumbel value of word w that needs no log: with u = 1 - eps, -log(u) >= eps, so
// g = -log(-log(u)) <= -log(eps); eps = (d + 0.5) * 2^-23 with d = 2^23 - 1 - (w >> 9), and
// -log(eps) <= (23 - floor(log2(d + 0.5))) * log(2), the floor read from the exponent bits of the exact float d + 0.5.
// Pure integer / float arithmetic, so the chunk loops below vectorise. Slack covers log rounding.
SPOT_SIMD_INLINE float gumbel_upper(uint32_t w) {
  const float f = static_cast<float>(static_cast<int32_t>(0x7FFFFFu - (w >> 9))) + 0.5f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  return static_cast<float>(23 - e) * 0.69314718f + 1e-3f;
}

// exp(x) for x <= 0 (x = -0.0, +0.0 or -inf included) in float: Cephes' expf polynomial (about 1 ulp), and exactly 0
// below -87.3 (where expf is subnormal or 0). Branch- and float-compare-free (the clamp is done on the bits), so
// that the softmax-sum loop vectorises without -fno-trapping-math. `arg` receives the clamped argument (finite),
// for sums of e * (x - m) that must stay 0 where e is. Used only for the denominator S and the entropy sum;
// reported probabilities use std::exp.
SPOT_SIMD_INLINE float exp_nonpos(float x, float& arg) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  const uint32_t lim = 0xC2AE999Au;  // the bits of -87.3f; for x <= 0 larger bits mean a smaller x
  const uint32_t keep = 0u - static_cast<uint32_t>(b <= lim || b < 0x80000000u);  // all ones unless x < -87.3
  const uint32_t cb = (b & keep) | (lim & ~keep);
  float xc;
  std::memcpy(&xc, &cb, sizeof(xc));
  arg = xc;
  const float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest, n in [-126, 0]
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const uint32_t scale_bits = (static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23) & keep;  // 2^n or 0
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return y * scale;
}
SPOT_SIMD_INLINE double exp_nonpos(double x, double& arg) {
  arg = x > -1e300 ? x : 0.0;  // -inf: e = 0 and e * arg = 0
  return std::exp(x);
}

template <typename A>
struct RowOut {
  int64_t* token;
  A* conf;
  A* topk_p;     // [top_k]
  int64_t* topk_id;  // [top_k]
};

// The smallest x that can still give p = exp(x - m) / S above `tail`, minus a margin far above the rounding of
// x - m, exp and the division (only used when tail is a normal number).
template <typename A>
SPOT_SIMD_INLINE A skip_threshold(A tail, A m, A log_sum) {
  const A tiny = sizeof(A) == 4 ? A(1e-30) : A(1e-300);
  if (!(tail >= tiny)) return -inf_of<A>();
  const A lt = std::log(tail) + log_sum;
  return m + lt - (A(1e-3) + A(1e-5) * (std::fabs(lt) + std::fabs(m)));
}

// Any of the kLanes entries at x is >= threshold (vectorised pre-test of a chunk).
template <typename A>
SPOT_SIMD_INLINE bool any_at_least(const A* x, A threshold) {
  int any = 0;
#pragma omp simd reduction(| : any)
  for (int l = 0; l < kLanes; ++l) any |= x[l] >= threshold;
  return any != 0;
}

// Step 4 keeps a sorted list up to this width (an insertion shifts at most K entries: cheap for the default K 32).
// A wider top-K (512 for a commit rule at T > 0, spot.drafters.default_top_k) would shift hundreds of entries per
// insertion, so it selects instead: O(V + K log K).
constexpr int64_t kSortedListWidth = 64;

// Step 4 for a top-K of at most kSortedListWidth: a sorted list (p_out / id_out, `width` entries preset to p -1,
// id -1), each entry inserted in place; x below the value that could enter a full list skips the exp.
template <typename A>
SPOT_SIMD_INLINE void top_k_by_sorted_list(const A* x, int64_t vocab, A m, A sum, A log_sum, int64_t width, A* p_out,
                                           int64_t* id_out) {
  A threshold = -inf_of<A>();
  for (int64_t v0 = 0; v0 < vocab; v0 += kLanes) {
    if (threshold > -inf_of<A>() && !any_at_least(x + v0, threshold)) continue;
    const int64_t v1 = std::min(v0 + kLanes, vocab);
    for (int64_t v = v0; v < v1; ++v) {
      const A a = x[v];
      if (a < threshold) continue;
      const A p = std::exp(a - m) / sum;
      if (!(p > p_out[width - 1])) continue;  // ids come in increasing order: an equal p stays behind
      int64_t i = width - 1;
      for (; i > 0 && p > p_out[i - 1]; --i) {
        p_out[i] = p_out[i - 1];
        id_out[i] = id_out[i - 1];
      }
      p_out[i] = p;
      id_out[i] = v;
      if (id_out[width - 1] >= 0) threshold = skip_threshold(p_out[width - 1], m, log_sum);
    }
  }
}

// Step 4 for a wide top-K: the `width` best entries (p desc, id asc) of p = exp(x - m) / sum into p_out / id_out
// (width <= vocab), the sorted list's entries in its order. The width-th largest x, t, bounds them: at least `width`
// entries have p >= p(t) (p is monotone in x), so every entry of the top-K has p >= p(t). The candidates are the
// entries with p >= p(t) (x below skip_threshold's bound cannot reach it), sorted, the first `width` kept.
template <typename A>
SPOT_SIMD_INLINE void top_k_by_selection(const A* x, int64_t vocab, A m, A sum, A log_sum, int64_t width, A* p_out,
                                         int64_t* id_out) {
  thread_local std::vector<A> scratch;
  thread_local std::vector<std::pair<A, int64_t>> candidates;
  scratch.assign(x, x + vocab);
  std::nth_element(scratch.begin(), scratch.begin() + (width - 1), scratch.end(), std::greater<A>());
  const A pt = std::exp(scratch[width - 1] - m) / sum;
  const A bound = skip_threshold(pt, m, log_sum);
  candidates.clear();
  for (int64_t v = 0; v < vocab; ++v) {
    if (x[v] < bound) continue;
    const A p = std::exp(x[v] - m) / sum;
    if (p >= pt) candidates.emplace_back(p, v);
  }
  std::sort(candidates.begin(), candidates.end(), [](const std::pair<A, int64_t>& a, const std::pair<A, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (int64_t i = 0; i < width; ++i) {
    p_out[i] = candidates[i].first;
    id_out[i] = candidates[i].second;
  }
}

// One row. buf holds at least `padded` (a multiple of kLanes) elements; entries past `vocab` are set to -inf.
template <typename S, typename A>
SPOT_SIMD_INLINE void score_row_body(const S* in, int64_t vocab, int64_t padded, bool tempered, A temp, uint32_t key,
                                     int kind, int64_t top_k, A* x, std::vector<A>& list_p,
                                     std::vector<int64_t>& list_id, const RowOut<A>& out) {
  // x = logits.to(cdtype) / T
  if (tempered) {
    for (int64_t v = 0; v < vocab; ++v) x[v] = static_cast<A>(in[v]) / temp;
  } else {
    for (int64_t v = 0; v < vocab; ++v) x[v] = static_cast<A>(in[v]);
  }
  for (int64_t v = vocab; v < padded; ++v) x[v] = -inf_of<A>();

  // 1. max and validity, vectorised per chunk of kMaxChunk entries; the first argmax lies in the first chunk whose
  // maximum is the row's.
  A m = -inf_of<A>();
  int bad = 0;
  int64_t best_chunk = 0;
  for (int64_t v0 = 0; v0 < padded; v0 += kMaxChunk) {
    const int64_t v1 = std::min(v0 + kMaxChunk, padded);
    A cm = -inf_of<A>();
    int cb = 0;
#pragma omp simd reduction(max : cm) reduction(| : cb)
    for (int64_t v = v0; v < v1; ++v) {
      const A a = x[v];
      cb |= !(a < inf_of<A>());
      cm = a > cm ? a : cm;
    }
    bad |= cb;
    if (cm > m) {
      m = cm;
      best_chunk = v0;
    }
  }
  if (bad || !(m > -inf_of<A>())) {
    *out.token = -1;
    *out.conf = std::numeric_limits<A>::quiet_NaN();
    for (int64_t i = 0; i < top_k; ++i) {
      out.topk_p[i] = A(0);
      out.topk_id[i] = -1;
    }
    return;
  }
  int64_t best = best_chunk;
  while (x[best] != m) ++best;

  // 2. softmax denominator S = sum exp(x - m) (and sum e * (x - m) for "neg_entropy"): vectorised in A over chunks
  // of kChunk entries, the chunk sums added in double.
  double s = 0.0, t = 0.0;
  for (int64_t v0 = 0; v0 < padded; v0 += kChunk) {
    const int64_t v1 = std::min(v0 + kChunk, padded);
    A cs = A(0), ct = A(0);
    if (kind == kNegEntropy) {
#pragma omp simd reduction(+ : cs, ct)
      for (int64_t v = v0; v < v1; ++v) {
        A d;
        const A e = exp_nonpos(x[v] - m, d);
        cs += e;
        ct += e * d;
      }
    } else {
#pragma omp simd reduction(+ : cs)
      for (int64_t v = v0; v < v1; ++v) {
        A d;
        cs += exp_nonpos(x[v] - m, d);
      }
    }
    s += cs;
    t += ct;
  }
  const A sum = static_cast<A>(s);
  const A log_sum = std::log(sum);

  // 3. token: coupled Gumbel-max, hashing only where x + G_MAX reaches the best key, and taking the logs only where
  // x + gumbel_upper(word) does. Ties: lowest id.
  int64_t token = best;
  if (tempered) {
    const A gmax = gumbel_max<A>();
    A cur = x[best] + gumbel_from_word<A>(noise_word(key, best));
    for (int64_t v0 = 0; v0 < padded; v0 += kLanes) {
      if (!any_at_least(x + v0, cur - gmax - (A(1) + A(1e-5) * std::fabs(cur)))) continue;  // loose pre-test
      int cand[kLanes];
      int any = 0;
#pragma omp simd reduction(| : any)
      for (int l = 0; l < kLanes; ++l) {
        const A a = x[v0 + l];
        const uint32_t w = noise_word(key, v0 + l);
        cand[l] = !(a + static_cast<A>(gumbel_upper(w)) < cur);
        any |= cand[l];
      }
      if (!any) continue;
      for (int l = 0; l < kLanes; ++l) {
        if (!cand[l]) continue;
        const int64_t v = v0 + l;
        const A a = x[v];
        if (a + gmax < cur) continue;  // exact: no noise can lift it to the best key (also skips -inf)
        const A k = a + gumbel_from_word<A>(noise_word(key, v));
        if (k > cur || (k == cur && v < token)) {
          cur = k;
          token = v;
        }
      }
    }
  }

  // 4. top-K of the computed probabilities, (p desc, id asc); "margin" needs at least the top 2.
  const int64_t kc = std::min(top_k, vocab);
  const int64_t width = std::max<int64_t>(kc, kind == kMargin ? std::min<int64_t>(2, vocab) : 1);
  list_p.assign(width, A(-1));
  list_id.assign(width, -1);
  if (width > kSortedListWidth) {
    top_k_by_selection(x, vocab, m, sum, log_sum, width, list_p.data(), list_id.data());
  } else {
    top_k_by_sorted_list(x, vocab, m, sum, log_sum, width, list_p.data(), list_id.data());
  }

  // 5. confidence.
  A conf;
  if (kind == kMargin) {
    conf = list_p[0] - (width > 1 ? list_p[1] : A(0));
  } else if (kind == kNegEntropy) {
    conf = static_cast<A>(t / s - std::log(s));
  } else if (kind == kRawProb && tempered) {
    A mr = -inf_of<A>();
    for (int64_t v = 0; v < vocab; ++v) mr = std::max(mr, static_cast<A>(in[v]));
    double sr = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sr += std::exp(static_cast<A>(in[v]) - mr);
    conf = std::exp(static_cast<A>(in[token]) - mr) / static_cast<A>(sr);
  } else {  // "prob", and "raw_prob" at T = 0 (the untempered softmax is p itself)
    conf = std::exp(x[token] - m) / sum;
  }

  *out.token = token;
  *out.conf = conf;
  for (int64_t i = 0; i < kc; ++i) {
    out.topk_p[i] = list_p[i];
    out.topk_id[i] = list_id[i];
  }
  for (int64_t i = kc; i < top_k; ++i) {  // K > V: pad with prob 0, id -1
    out.topk_p[i] = A(0);
    out.topk_id[i] = -1;
  }
}

// score_row(...): score_row_body built for each SIMD level, called at the process's level.
SPOT_SIMD_LEVELS(score_row, score_row_body)

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> score_cpu(
    const at::Tensor& logits_in, const at::Tensor& masked_in, int64_t seed, const at::Tensor& rows_in,
    const at::Tensor& block_start_in, const at::Tensor& steps_in, double temperature, c10::string_view confidence,
    int64_t top_k) {
  // The public op's router validated everything; these checks keep a direct call of the private op memory safe.
  const auto dt = logits_in.scalar_type();
  TORCH_CHECK_TYPE(dt == at::kHalf || dt == at::kBFloat16 || dt == at::kFloat || dt == at::kDouble,
                   "spot.score: logits must have dtype float16/bfloat16/float32/float64");
  TORCH_CHECK_VALUE(logits_in.dim() >= 2 && logits_in.size(-1) >= 1, "spot.score: logits must be [..., B, V], V >= 1");
  TORCH_CHECK_TYPE(masked_in.scalar_type() == at::kBool, "spot.score: masked must be bool");
  TORCH_CHECK_VALUE(masked_in.sizes() == logits_in.sizes().slice(0, logits_in.dim() - 1),
                    "spot.score: masked must have shape logits.shape[:-1]");
  const auto lead = logits_in.sizes().slice(0, logits_in.dim() - 2);
  for (const at::Tensor* t : {&rows_in, &block_start_in, &steps_in}) {
    TORCH_CHECK_TYPE(t->scalar_type() == at::kLong, "spot.score: rows, block_start, steps must be int64");
    TORCH_CHECK_VALUE(t->sizes() == lead, "spot.score: rows, block_start, steps must have shape logits.shape[:-2]");
  }
  TORCH_CHECK_VALUE(seed >= 0, "spot.score: seed must lie in [0, 2^63)");
  TORCH_CHECK_VALUE(std::isfinite(temperature) && temperature >= 0, "spot.score: temperature must be finite, >= 0");
  TORCH_CHECK_VALUE(top_k >= 1, "spot.score: top_k must be >= 1");
  const int kind = confidence_kind(confidence);

  const int64_t vocab = logits_in.size(-1);
  const int64_t block = logits_in.size(-2);
  int64_t nodes = 1;
  for (auto d : lead) nodes *= d;
  const int64_t n_rows = nodes * block;
  const auto cdtype = dt == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<int64_t> lead_b(logits_in.sizes().begin(), logits_in.sizes().end() - 1);
  std::vector<int64_t> lead_bk = lead_b;
  lead_bk.push_back(top_k);
  const auto opts = logits_in.options();
  at::Tensor tokens = at::empty(lead_b, opts.dtype(at::kLong));
  at::Tensor conf = at::empty(lead_b, opts.dtype(cdtype));
  at::Tensor topk_p = at::empty(lead_bk, opts.dtype(cdtype));
  at::Tensor topk_id = at::empty(lead_bk, opts.dtype(at::kLong));
  at::Tensor commit = at::empty(lead, opts.dtype(at::kLong));
  if (nodes == 0) return {tokens, conf, topk_p, topk_id, commit};
  int64_t* commit_ptr = commit.data_ptr<int64_t>();
  if (block == 0) {
    for (int64_t n = 0; n < nodes; ++n) commit_ptr[n] = -1;
    return {tokens, conf, topk_p, topk_id, commit};
  }

  const at::Tensor logits = logits_in.contiguous();
  const at::Tensor masked = masked_in.contiguous();
  const at::Tensor rows = rows_in.contiguous();
  const at::Tensor block_start = block_start_in.contiguous();
  const at::Tensor steps = steps_in.contiguous();
  const int64_t* r_ptr = rows.data_ptr<int64_t>();
  const int64_t* b_ptr = block_start.data_ptr<int64_t>();
  const int64_t* s_ptr = steps.data_ptr<int64_t>();
  const uint32_t skey = seed_key(seed);
  const bool tempered = temperature > 0;
  int64_t* tok_ptr = tokens.data_ptr<int64_t>();
  int64_t* id_ptr = topk_id.data_ptr<int64_t>();
  const bool* m_ptr = masked.data_ptr<bool>();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dt, "spot_score_cpu", [&] {
    using S = scalar_t;
    using A = acc_of<S>;
    const S* in = logits.data_ptr<S>();
    A* conf_ptr = conf.data_ptr<A>();
    A* p_ptr = topk_p.data_ptr<A>();
    const A temp = static_cast<A>(temperature);  // the temperature rounded to cdtype, as the reference's
    const int64_t padded = (vocab + kLanes - 1) / kLanes * kLanes;
    parallel_rows(n_rows, vocab * 4, [&](int64_t begin, int64_t end) {
      std::vector<A> buf(padded);
      std::vector<A> list_p;
      std::vector<int64_t> list_id;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t node = r / block;
        const int64_t j = r - node * block;
        const uint32_t key = tempered ? row_key(skey, r_ptr[node], b_ptr[node] + j, s_ptr[node]) : 0u;
        const RowOut<A> out{tok_ptr + r, conf_ptr + r, p_ptr + r * top_k, id_ptr + r * top_k};
        score_row(in + r * vocab, vocab, padded, tempered, temp, key, kind, top_k, buf.data(), list_p, list_id, out);
      }
    });
    // commit_pos: the masked, valid position with the highest confidence, ties lowest position, -1 when none.
    for (int64_t n = 0; n < nodes; ++n) {
      int64_t pick = -1;
      A best = A(0);
      for (int64_t j = 0; j < block; ++j) {
        const int64_t r = n * block + j;
        if (!m_ptr[r] || tok_ptr[r] < 0) continue;
        if (pick < 0 || conf_ptr[r] > best) {
          pick = j;
          best = conf_ptr[r];
        }
      }
      commit_ptr[n] = pick;
    }
  });
  return {tokens, conf, topk_p, topk_id, commit};
}

}  // namespace
}  // namespace spot_cpu

TORCH_LIBRARY_IMPL(spot, CPU, m) { m.impl("_score_cpu", &spot_cpu::score_cpu); }
