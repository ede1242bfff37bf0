"""How well the stale pass predicts a commit rule's next step (docs/rules.md, "Where T 1 loses").

Along `standard`'s trajectory with the rule (the Session API, one prompt at a time, noise row = prompt number), at
every step s >= 1 of a block with more masked positions than the step commits, from the stale pass one step back
(what a SPOT round drafts the depth-1 children from):
  tokens      the stale Gumbel-max tokens (T = 0: the stale top-1) at the step's positions are all the sample's;
  <ranking>1  the step's set is the ranking's first m positions, with the tokens right;
  <ranking>8  the set is one of the eight candidates spot::expand_steps builds from the ranking (STEP_VARIANTS),
              with the tokens right.
Rankings: `resampled` (the confidence drafter over a rule: drafters.resampled_confidence at the step) and `learned`
(the position logits of the shipped drafter, or of --drafter). `probe_tokens`, `probe1`, `probe8`: the same with the
resampled ranking, from the node a step back plus the previous step's more confident commit (what a probe that
holds that commit gives the next tree, docs/rules.md "Probes"; one extra pass per step, not counted anywhere).

    OMP_NUM_THREADS=1 python bench/rule_step_coverage.py --rule steps:16 --temperature 1 --num-prompts 8
"""

from __future__ import annotations

import argparse
import collections
import json
import math

import torch

import spot
import spot_kernels
from spot.drafters import NoiseCoordinates, StaleFeatures, default_top_k, resampled_confidence, resampled_tokens
from spot.prompts import held_out_prompts
from spot.rules import parse_rule
from spot_kernels.reference.expand_frontier import STEP_VARIANTS


def candidate_sets(order: list[int], m: int) -> list[frozenset]:
    """expand_steps' candidates of size m from a ranking: the first m ranks, and each (rank out, rank in) swap."""
    out = []
    for out_off, in_off in STEP_VARIANTS:
        if out_off == 0:
            out.append(frozenset(order[:m]))
        elif m + out_off >= 0 and m + in_off < len(order):
            swapped = [p for r, p in enumerate(order[:m]) if r != m + out_off] + [order[m + in_off]]
            out.append(frozenset(swapped))
    return out


def ranking(scores: torch.Tensor, masked: torch.Tensor) -> list[int]:
    """The masked positions by descending score, ties to the lower position."""
    order = torch.sort(torch.where(masked, scores.double(), -math.inf), descending=True, stable=True).indices
    return [p for p in order.tolist() if masked[p]]


def _scorable(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """A pass's logits with the mask token never a candidate (as the decoder scores them)."""
    logits = logits.clone()
    logits[..., mask_id] = -math.inf
    return logits


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rule", default="steps:16")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--first-prompt", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--drafter", default="default", help="the learned drafter (spot.load_drafter's name)")
    p.add_argument("--top-k", type=int, help="the stale top-K (default: generate's, spot.drafters.default_top_k)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    target, drafter = spot.load_target(), spot.load_drafter(a.drafter)
    B, T = a.block_size, a.temperature
    rule = parse_rule(a.rule)
    tables = rule.tables(B, "cpu")
    top_k = min(default_top_k(rule.is_one, T) if a.top_k is None else a.top_k, target.vocab_size)
    texts = held_out_prompts(a.first_prompt + a.num_prompts)[a.first_prompt:]
    counts = collections.Counter()
    for n, text in enumerate(texts, a.first_prompt):
        session = target.start([target.tokenizer.encode(text)], a.max_new_tokens, B)
        rows = torch.tensor([n])
        for block_index in range(a.max_new_tokens // B):
            block = torch.full((1, B), target.mask_id)
            step = torch.zeros(1, dtype=torch.long)
            stale = stale_masked = None  # the pass one step back, and the block it scored
            half = None  # the block one step back plus that step's more confident commit
            while (block == target.mask_id).any():
                masked = block == target.mask_id
                out = spot_kernels.score(_scorable(session.score(block[:, None]), target.mask_id), masked[:, None], 0,
                                         rows[:, None], session.block_start[:, None], step[:, None], T, top_k=top_k)
                commit = spot_kernels.commit_rule(out.confidence, masked[:, None], step[:, None], tables.quota,
                                                  tables.thresholds, tables.inclusive)[0, 0]
                true_set = frozenset(torch.nonzero(commit).flatten().tolist())
                if stale is not None and int(masked.sum()) > len(true_set):
                    noise = NoiseCoordinates(0, rows, step, T)
                    features = StaleFeatures(stale.topk_probs[:, 0], stale.topk_ids[:, 0], stale.tokens[:, 0],
                                             stale.confidence[:, 0], stale_masked, session.block_start, block_index,
                                             "prob", noise)
                    zero = torch.zeros(1, dtype=torch.long)
                    learned = drafter.position_logits(features, masked, zero, zero)[0]
                    resampled = resampled_confidence(features.topk_probs, features.topk_ids, 0, rows,
                                                     session.block_start, step, T)[0]
                    tokens = resampled_tokens(features.topk_probs, features.topk_ids, 0, rows, session.block_start,
                                              step, T)[0]
                    right = all(int(tokens[q]) == int(out.tokens[0, 0, q]) for q in true_set)
                    counts["steps"] += 1
                    counts["tokens"] += right
                    for name, scores in (("resampled", resampled), ("learned", learned)):
                        order = ranking(scores, masked[0])
                        counts[name + "1"] += right and frozenset(order[:len(true_set)]) == true_set
                        counts[name + "8"] += right and true_set in candidate_sets(order, len(true_set))
                    probe = spot_kernels.score(_scorable(session.score(half[:, None]), target.mask_id),
                                               half[:, None] == target.mask_id, 0, rows[:, None],
                                               session.block_start[:, None], step[:, None], T, top_k=top_k)
                    p_probs, p_ids = probe.topk_probs[:, 0], probe.topk_ids[:, 0]
                    p_tokens = resampled_tokens(p_probs, p_ids, 0, rows, session.block_start, step, T)[0]
                    p_right = all(int(p_tokens[q]) == int(out.tokens[0, 0, q]) for q in true_set)
                    order = ranking(resampled_confidence(p_probs, p_ids, 0, rows, session.block_start, step, T)[0],
                                    masked[0])
                    counts["probe_tokens"] += p_right
                    counts["probe1"] += p_right and frozenset(order[:len(true_set)]) == true_set
                    counts["probe8"] += p_right and true_set in candidate_sets(order, len(true_set))
                stale, stale_masked = out, masked
                half = block.clone()
                if true_set:  # (a step may commit nothing: Dream's schedule)
                    first = max(true_set, key=lambda q: (float(out.confidence[0, 0, q]), -q))
                    half[0, first] = out.tokens[0, 0, first]
                block = torch.where(commit[None], out.tokens[:, 0], block)
                step += 1
            session.append(block)
    steps = counts.pop("steps")
    report = {"rule": a.rule, "temperature": T, "top_k": top_k,
              "prompts": [a.first_prompt, a.first_prompt + a.num_prompts], "steps": steps,
              **{k: round(v / steps, 3) for k, v in counts.items()}}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
