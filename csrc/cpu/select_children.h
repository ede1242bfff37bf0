// The token a drafted child commits at one position (docs/ops.md, "Drafter child selection"), shared by the CPU
// kernels that draft children: select_children.cpp (one position per child) and expand_frontier.cpp's expand_steps
// (a whole step's positions per child), so that both draw exactly the same token for the same commit.
#pragma once

#include "common.h"

namespace spot_cpu {

// argmax_i log(probs[i]) + g(key, ids[i]) over ids >= 0 and probs > 0, ties lowest i; -1 if none. The log and the
// noise in P (float64 for float64 stale probabilities, else float32), as the reference.
template <typename P>
inline int64_t child_token(const P* probs, const int64_t* ids, int64_t top, uint32_t key) {
  int64_t token = -1;
  P best = -inf_of<P>();
  for (int64_t i = 0; i < top; ++i) {
    if (!(ids[i] >= 0 && probs[i] > P(0))) continue;
    const P value = std::log(probs[i]) + gumbel_from_word<P>(noise_word(key, ids[i]));
    if (token < 0 || value > best) {
      best = value;
      token = ids[i];
    }
  }
  return token;
}

// The token of a child committing block position p: the stale top-K at p (probs, ids: its K entries) drawn with
// the coupled noise of (row, block_start + p, step) at T > 0, the stale top-1 id at T = 0; -1 when K = 0.
template <typename P>
inline int64_t position_token(const P* probs, const int64_t* ids, int64_t top, bool tempered, uint32_t seed_key,
                              int64_t row, int64_t position, int64_t step) {
  if (top == 0) return -1;
  if (!tempered) return ids[0];
  return child_token(probs, ids, top, row_key(seed_key, row, position, step));
}

}  // namespace spot_cpu
