"""Python entry points for `torch.ops.spot.*` (docs/ops.md is the full contract).

Each function checks its scalar arguments (so a bad seed or temperature gets a clear error rather than a schema
conversion error), then calls the registered op, which validates tensors, picks a backend and runs it. Because the
calls go through torch.ops, torch.compile and torch.library.opcheck see the real ops.

Every op takes `backend`: "auto" (default; honours the SPOT_BACKEND environment variable), "reference", "triton"
or "cuda". A backend that cannot run the call raises `spot_kernels.BackendUnavailable`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import checks


class ScoreOutput(NamedTuple):
    tokens: torch.Tensor  # [..., B] int64
    confidence: torch.Tensor  # [..., B] float32 (float64 for float64 logits)
    topk_probs: torch.Tensor  # [..., B, K] float32 / float64
    topk_ids: torch.Tensor  # [..., B, K] int64
    commit_pos: torch.Tensor  # [...] int64


class ChildSelection(NamedTuple):
    child_pos: torch.Tensor  # [F, k] int64
    child_logprob: torch.Tensor  # [F, k] dtype of position_logits
    child_tokens: torch.Tensor  # [F, k] int64


class VerifyOutput(NamedTuple):
    accepted_pos: torch.Tensor  # [b, N] int64
    accepted_tokens: torch.Tensor  # [b, N] int64
    num_accepted: torch.Tensor  # [b] int64
    new_block: torch.Tensor  # [b, B] int64
    last_node: torch.Tensor  # [b] int64


def noise_uniform(
    seed: int,
    rows: torch.Tensor,
    positions: torch.Tensor,
    steps: torch.Tensor,
    vocab_ids: torch.Tensor,
    backend: str = "auto",
) -> torch.Tensor:
    """The coupled-noise uniforms u(seed, row, position, step, vocab id), bit for bit as in docs/noise.md.

    Args:
        seed: int in [0, 2^63).
        rows, positions, steps, vocab_ids: int64 tensors, broadcastable, on one device (only the low 32 bits of
            each value are used).
        backend: see the module docstring.
    Returns:
        float32 tensor of the broadcast shape, values in [2^-24, 1 - 2^-24]; the Gumbel noise is -log(-log(u)).
    """
    seed = checks.seed("noise_uniform", seed)
    checks.tensor_args("noise_uniform", rows=rows, positions=positions, steps=steps, vocab_ids=vocab_ids)
    return torch.ops.spot.noise_uniform(seed, rows, positions, steps, vocab_ids, backend)


def score(
    logits: torch.Tensor,
    masked: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    confidence: str = "prob",
    top_k: int = 32,
    backend: str = "auto",
) -> ScoreOutput:
    """Fused scoring of block states: coupled Gumbel-max tokens, confidences, top-K and the next commit.

    Args:
        logits: [..., B, V] float16/bfloat16/float32/float64, V >= 1. Computed in float64 for float64 logits,
            else float32, as x = logits / temperature (T = 0: x = logits).
        masked: [..., B] bool, True where the position is still masked.
        seed: int in [0, 2^63).
        rows: [...] int64, noise row id of the sequence each node belongs to.
        block_start: [...] int64 >= 0, absolute position of block position 0.
        steps: [...] int64 >= 0, commits already made inside the block (depth d under a root with k commits:
            k + d).
        temperature: finite float >= 0; 0 means greedy (argmax, ties lowest id).
        confidence: "prob" | "raw_prob" | "margin" | "neg_entropy".
        top_k: K >= 1; when K > V the tail is padded with probability 0 and id -1.
        backend: see the module docstring.
    Returns:
        ScoreOutput(tokens [..., B] int64, confidence [..., B] cdtype, topk_probs [..., B, K] cdtype,
        topk_ids [..., B, K] int64, commit_pos [...] int64). Rows with NaN or +inf, or all -inf, give token -1,
        confidence NaN, top-K (0, -1) and are never committed; commit_pos is -1 when nothing can be committed.
    """
    op = "score"
    seed = checks.seed(op, seed)
    temperature = checks.temperature(op, temperature)
    top_k = checks.integer(op, "top_k", top_k, 1)
    checks.tensor_args(op, logits=logits, masked=masked, rows=rows, block_start=block_start, steps=steps)
    return ScoreOutput(*torch.ops.spot.score(logits, masked, seed, rows, block_start, steps, temperature, confidence,
                                             top_k, backend))


def select_children(
    position_logits: torch.Tensor,
    masked: torch.Tensor,
    path_logprob: torch.Tensor,
    stale_topk_probs: torch.Tensor,
    stale_topk_ids: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    k: int,
    backend: str = "auto",
) -> ChildSelection:
    """Expand F frontier nodes into their k most likely children (drafted commits).

    Args:
        position_logits: [F, B] float32/float64, the drafter's unnormalised log P(next commit = j). NaN counts as
            -inf; +inf as the largest finite value.
        masked: [F, B] bool, the frontier node's own masked flags.
        path_logprob: [F], same dtype as position_logits, log probability of the path root -> node.
        stale_topk_probs: [F, B, K] float32/float64 (expanded views are fine).
        stale_topk_ids: [F, B, K] int64, -1 for padding.
        seed: int in [0, 2^63).
        rows, block_start, steps: [F] int64; `steps` is the frontier node's step (its children commit at it).
        temperature: finite float >= 0.
        k: children per node, >= 1.
        backend: see the module docstring.
    Returns:
        ChildSelection(child_pos [F, k] int64 (masked positions with the largest logits, ties lowest position,
        -1 padding), child_logprob [F, k] (path_logprob + log_softmax over eligible positions; -inf padding),
        child_tokens [F, k] int64 (coupled Gumbel-max over the stale top-K; T = 0: stale_topk_ids[p, 0]; -1
        when none)).
    """
    op = "select_children"
    seed = checks.seed(op, seed)
    temperature = checks.temperature(op, temperature)
    k = checks.integer(op, "k", k, 1)
    checks.tensor_args(op, position_logits=position_logits, masked=masked, path_logprob=path_logprob,
                       stale_topk_probs=stale_topk_probs, stale_topk_ids=stale_topk_ids, rows=rows,
                       block_start=block_start, steps=steps)
    return ChildSelection(*torch.ops.spot.select_children(position_logits, masked, path_logprob, stale_topk_probs,
                                                          stale_topk_ids, seed, rows, block_start, steps,
                                                          temperature, k, backend))


def _tree_ints(op, key_start, prefix_len, num_new, num_nodes, block_size):
    checks.tensor_args(op, key_start=key_start)
    return (checks.integer(op, "prefix_len", prefix_len, 0), checks.integer(op, "num_new", num_new, 0),
            checks.integer(op, "num_nodes", num_nodes, 0), checks.integer(op, "block_size", block_size, 1))


_TREE_ARGS = """
    Args:
        key_start: [b] int64, first valid key of each row (rows are left-padded), 0 <= key_start <= prefix_len.
        prefix_len: cached prefix keys, including the `num_new` tokens appended in this pass.
        num_new: new prefix tokens queried in this pass, 0 <= num_new <= prefix_len.
        num_nodes: block copies (tree nodes) scored in this pass, >= 0.
        block_size: B >= 1.
        backend: see the module docstring.
    Layout: Q = num_new + num_nodes * block_size queries (new tokens, then node tokens), K = prefix_len +
    num_nodes * block_size keys (prefix, then node tokens). New tokens attend causally to valid keys; node tokens
    attend to the valid prefix and bidirectionally to their own node only.
"""


def tree_mask(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
              backend: str = "auto") -> torch.Tensor:
    ints = _tree_ints("tree_mask", key_start, prefix_len, num_new, num_nodes, block_size)
    return torch.ops.spot.tree_mask(key_start, *ints, backend)


tree_mask.__doc__ = f"""Boolean tree-attention mask, True = attend: bool [b, 1, Q, K] (SDPA / Hugging Face 4D).
{_TREE_ARGS}"""


def tree_mask_additive(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
                       dtype: torch.dtype, backend: str = "auto") -> torch.Tensor:
    ints = _tree_ints("tree_mask_additive", key_start, prefix_len, num_new, num_nodes, block_size)
    checks.additive_dtype("tree_mask_additive", dtype)
    return torch.ops.spot.tree_mask_additive(key_start, *ints, dtype, backend)


tree_mask_additive.__doc__ = f"""Additive tree-attention mask: [b, 1, Q, K] of the floating `dtype`, 0 or -inf.
{_TREE_ARGS}"""


def tree_mask_packed(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
                     backend: str = "auto") -> torch.Tensor:
    ints = _tree_ints("tree_mask_packed", key_start, prefix_len, num_new, num_nodes, block_size)
    return torch.ops.spot.tree_mask_packed(key_start, *ints, backend)


tree_mask_packed.__doc__ = f"""Bit-packed tree-attention mask: int32 [b, Q, ceil(K / 32)], key k is bit k % 32 of
word k // 32 (two's complement, so bit 31 makes the word negative).
{_TREE_ARGS}"""


def tree_position_ids(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
                      backend: str = "auto") -> torch.Tensor:
    ints = _tree_ints("tree_position_ids", key_start, prefix_len, num_new, num_nodes, block_size)
    return torch.ops.spot.tree_position_ids(key_start, *ints, backend)


tree_position_ids.__doc__ = f"""Position ids of the queries: int64 [b, Q]. New token q (key index
kq = prefix_len - num_new + q) -> max(kq - key_start, 0); node token at block position j ->
prefix_len - key_start + j.
{_TREE_ARGS}"""


def tree_mask_mod(key_start: torch.Tensor, prefix_len: int, num_new: int, block_size: int):
    """The tree_mask rule as a FlexAttention mask_mod(b, h, q_idx, kv_idx) -> bool tensor.

    Use with torch.nn.attention.flex_attention.create_block_mask(mask_mod, b, None, Q, K) where
    Q = num_new + num_nodes * block_size and K = prefix_len + num_nodes * block_size.

    Args:
        key_start: [b] int64 (captured; value-checked now on CPU), 0 <= key_start <= prefix_len.
        prefix_len, num_new, block_size: as for tree_mask.
    """
    from .reference.tree_attention import tree_mask_mod as build

    op = "tree_mask_mod"
    checks.tree(op, key_start, prefix_len, num_new, 0, block_size, values=True)
    return build(key_start, prefix_len, num_new, block_size)


def verify_tree(
    parents: torch.Tensor,
    draft_pos: torch.Tensor,
    draft_tokens: torch.Tensor,
    target_pos: torch.Tensor,
    target_tokens: torch.Tensor,
    block: torch.Tensor,
    backend: str = "auto",
) -> VerifyOutput:
    """Accept the longest drafted chain that matches the target's own commits, on device, without host sync.

    Args:
        parents: [b, N] int64, N >= 1; parents[:, 0] = -1 (root); for i > 0, 0 <= parents[:, i] < i, or -1 for
            an inactive (padding) node.
        draft_pos, draft_tokens: [b, N] int64, the commit that turns the parent's state into node i's state.
        target_pos, target_tokens: [b, N] int64, the target's own commit from node i's state (score's commit_pos
            and its token); -1 = none.
        block: [b, B] int64, the root's block state.
        backend: see the module docstring.
    Returns:
        VerifyOutput(accepted_pos [b, N], accepted_tokens [b, N] (commits in order, -1 padded),
        num_accepted [b], new_block [b, B] (block with the commits written in), last_node [b] (deepest accepted
        node, ties lowest index)); all int64.
    """
    checks.tensor_args("verify_tree", parents=parents, draft_pos=draft_pos, draft_tokens=draft_tokens,
                       target_pos=target_pos, target_tokens=target_tokens, block=block)
    return VerifyOutput(*torch.ops.spot.verify_tree(parents, draft_pos, draft_tokens, target_pos, target_tokens,
                                                    block, backend))


def tree_attention(
    q: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    k_nodes: torch.Tensor,
    v_nodes: torch.Tensor,
    key_start: torch.Tensor,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Shared-prefix tree attention: N node copies of a block attend to one cached prefix and to themselves.

    Args:
        q: [b, Hq, N, B, D] float16/bfloat16/float32/float64, the queries of N nodes of a B-token block.
        k_prefix, v_prefix: [b, Hkv, P, D], same dtype: the cached prefix shared by every node of a row;
            Hq must be a multiple of Hkv (query head h reads key/value head h // (Hq // Hkv)).
        k_nodes, v_nodes: [b, Hkv, N, B, D], same dtype: each node's own keys/values.
        key_start: [b] int64, first valid prefix key of each row (left padding), 0 <= key_start <= P.
        scale: softmax scale, finite and > 0; None means 1/sqrt(D).
        backend: see the module docstring.
    Returns:
        [b, Hq, N, B, D] in q's dtype: query (b, h, n, i) attends to prefix keys key_start[b] <= k < P and to the
        B keys of node n (bidirectionally), never to another node.
    """
    op = "tree_attention"
    scale = checks.attention_scale(op, scale)
    checks.tensor_args(op, q=q, k_prefix=k_prefix, v_prefix=v_prefix, k_nodes=k_nodes, v_nodes=v_nodes,
                       key_start=key_start)
    return torch.ops.spot.tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale, backend)
