"""Triton kernels for spot::verify_tree and spot::verify_steps (docs/ops.md, "Parallel verification").

One program per batch row holds the whole tree (N <= BLOCK_N lanes) in registers; no host synchronisation and a
fixed amount of work for a given N, so the launch is CUDA-graph capturable:
  1. edge flags: verify_tree, node i's drafted commit equals its parent's target commit (parent's target read with
     `tl.gather`); verify_steps, node i's state equals its parent's successor at every position ([BLOCK_N, BLOCK_B]
     tiles of the states, the parent's rows read at the parent's offset);
  2. pointer jumping, ceil(log2 N) rounds: ok &= ok[ptr], depth += depth[ptr], ptr = ptr[ptr]
     (root and inactive nodes point at themselves);
  3. the deepest accepted node (ties lowest index) from one max over depth * N + (N - 1 - i);
  4. the chain root -> last: lane t lifts `last` by depth(last) - t with binary lifting, recomputing the jump
     tables (lifting by 2^a then 2^b commutes, so the bits are applied low to high);
  5. verify_tree: the commits in order, their count, and the new block (position j takes the token of the last
     commit at j). verify_steps: per position the first chain step committing it, a histogram of those steps and
     its exclusive prefix sum give each step's first slot, and a running within-step count (a cumsum over each
     B-chunk) each position's slot; the new block is the last node's successor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import next_pow2, on_device


@triton.jit
def _accepted_chain(up, has_parent, ok, live, N, ROUNDS: tl.constexpr, BLOCK_N: tl.constexpr):
    """(last, its depth, chain): the deepest accepted node (ties lowest index) and chain[t] = its ancestor at depth t
    (t <= depth; `last` beyond), from each node's one step up and its own edge flag."""
    i = tl.arange(0, BLOCK_N)
    depth = has_parent.to(tl.int32)
    ptr = up
    for _ in tl.static_range(ROUNDS):
        ok = ok & tl.gather(ok, ptr, 0)
        depth = depth + tl.gather(depth, ptr, 0)
        ptr = tl.gather(ptr, ptr, 0)

    accepted = live & (ok != 0)
    rank = tl.where(accepted, depth * N + (N - 1 - i), -1)
    best = tl.max(rank, axis=0)  # the root is always accepted, so best >= 0
    last = N - 1 - best % N
    last_depth = best // N

    lift = tl.maximum(last_depth - i, 0)
    chain = tl.zeros([BLOCK_N], tl.int32) + last
    jump = up
    for r in tl.static_range(ROUNDS):
        chain = tl.where(((lift >> r) & 1) != 0, tl.gather(jump, chain, 0), chain)
        jump = tl.gather(jump, jump, 0)
    return last, last_depth, chain


@triton.jit
def _verify_kernel(parents_ptr, dpos_ptr, dtok_ptr, tpos_ptr, ttok_ptr, block_ptr,
                   acc_pos_ptr, acc_tok_ptr, num_ptr, new_block_ptr, last_ptr,
                   N, B, ROUNDS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_N)
    live = i < N
    base = row * N
    parents = tl.load(parents_ptr + base + i, mask=live, other=-1)
    draft_pos = tl.load(dpos_ptr + base + i, mask=live, other=-1)
    draft_tok = tl.load(dtok_ptr + base + i, mask=live, other=-1)
    target_pos = tl.load(tpos_ptr + base + i, mask=live, other=-1)
    target_tok = tl.load(ttok_ptr + base + i, mask=live, other=-1)

    has_parent = live & (i > 0) & (parents >= 0) & (parents < N)
    up = tl.where(has_parent, parents, i).to(tl.int32)  # root, inactive and padding lanes point at themselves
    parent_pos = tl.gather(target_pos, up, 0)
    parent_tok = tl.gather(target_tok, up, 0)
    edge = has_parent & (parent_pos >= 0) & (draft_pos == parent_pos) & (draft_tok == parent_tok)
    last, last_depth, chain = _accepted_chain(up, has_parent, (edge | (i == 0)).to(tl.int32), live, N, ROUNDS,
                                              BLOCK_N)
    commit_pos = tl.gather(target_pos, chain, 0)
    commit_tok = tl.gather(target_tok, chain, 0)
    real = live & (i <= last_depth) & (commit_pos >= 0)
    tl.store(acc_pos_ptr + base + i, tl.where(real, commit_pos, -1), mask=live)
    tl.store(acc_tok_ptr + base + i, tl.where(real, commit_tok, -1), mask=live)
    tl.store(num_ptr + row, tl.sum(real.to(tl.int64), axis=0))
    tl.store(last_ptr + row, last.to(tl.int64))

    # new block: position j takes the token of the last commit at j (as a sequential scatter would), else stays
    for b0 in range(0, B, BLOCK_B):
        jb = b0 + tl.arange(0, BLOCK_B)
        in_b = jb < B
        old = tl.load(block_ptr + row * B + jb, mask=in_b, other=0)
        hit = real[None, :] & (commit_pos[None, :] == jb[:, None])  # [BLOCK_B, BLOCK_N]
        which = tl.max(tl.where(hit, i[None, :], -1), axis=1)
        tok = tl.sum(tl.where(hit & (i[None, :] == which[:, None]), commit_tok[None, :], 0), axis=1)
        tl.store(new_block_ptr + row * B + jb, tl.where(which >= 0, tok, old), mask=in_b)


def _int64_outputs(device, *shapes):
    return tuple(torch.empty(shape, dtype=torch.int64, device=device) for shape in shapes)


def _row_tiles(n, width, tile):
    """(ROUNDS, BLOCK_N, BLOCK_B) of a one-program-per-row launch over N nodes and B positions: [BLOCK_N, BLOCK_B]
    tiles of at most `tile` elements (BLOCK_B at least 16)."""
    block_n = max(2, next_pow2(n))
    return max(1, (n - 1).bit_length()), block_n, max(2, min(next_pow2(width), max(16, tile // block_n)))


def verify_tree(parents, draft_pos, draft_tokens, target_pos, target_tokens, block):
    b, n = parents.shape
    width = block.shape[1]
    out = _int64_outputs(parents.device, (b, n), (b, n), (b,), (b, width), (b,))
    if b == 0:
        return out
    rounds, block_n, block_b = _row_tiles(n, width, 4096)
    with on_device(parents):
        _verify_kernel[(b,)](
            parents.contiguous(), draft_pos.contiguous(), draft_tokens.contiguous(), target_pos.contiguous(),
            target_tokens.contiguous(), block.contiguous(), *out, n, width, ROUNDS=rounds, BLOCK_N=block_n,
            BLOCK_B=block_b, num_warps=1 if block_n <= 64 else 4,
        )
    return out


@triton.jit
def _first_steps(commit_ptr, node_base, chain, jb, in_b, i, live, last_depth, B, BLOCK_N: tl.constexpr):
    """[BLOCK_N, BLOCK_B]: first[t, j], position jb[j] is first committed at chain step t (t <= last_depth)."""
    on_chain = live & (i <= last_depth)
    rows = (node_base + chain.to(tl.int64)) * B
    hit = tl.load(commit_ptr + rows[:, None] + jb[None, :], mask=on_chain[:, None] & in_b[None, :], other=0) != 0
    step = tl.min(tl.where(hit, i[:, None], BLOCK_N), axis=0)  # BLOCK_N: none
    return step[None, :] == i[:, None]


@triton.jit
def _steps_kernel(parents_ptr, states_ptr, commit_ptr, tokens_ptr, acc_pos_ptr, num_ptr, steps_ptr,
                  new_block_ptr, last_ptr, N, B, ROUNDS: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_B: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_N)
    live = i < N
    base = row * N
    parents = tl.load(parents_ptr + base + i, mask=live, other=-1)
    has_parent = live & (i > 0) & (parents >= 0) & (parents < N)
    up = tl.where(has_parent, parents, i).to(tl.int32)  # root, inactive and padding lanes point at themselves

    # edge parent -> i: node i's state is the parent's successor at every position
    mismatch = tl.zeros([BLOCK_N], tl.int32)
    node_rows = (base + i) * B
    parent_rows = (base + up.to(tl.int64)) * B
    for b0 in range(0, B, BLOCK_B):
        jb = b0 + tl.arange(0, BLOCK_B)
        tile = has_parent[:, None] & (jb < B)[None, :]
        state = tl.load(states_ptr + node_rows[:, None] + jb[None, :], mask=tile, other=0)
        p_off = parent_rows[:, None] + jb[None, :]
        p_state = tl.load(states_ptr + p_off, mask=tile, other=0)
        p_commit = tl.load(commit_ptr + p_off, mask=tile, other=0) != 0
        p_token = tl.load(tokens_ptr + p_off, mask=tile, other=0)
        differs = state != tl.where(p_commit, p_token, p_state)
        mismatch = tl.maximum(mismatch, tl.max(differs.to(tl.int32), axis=1))
    edge = has_parent & (mismatch == 0)
    last, last_depth, chain = _accepted_chain(up, has_parent, (edge | (i == 0)).to(tl.int32), live, N, ROUNDS,
                                              BLOCK_N)
    tl.store(last_ptr + row, last.to(tl.int64))
    tl.store(steps_ptr + row, last_depth.to(tl.int64) + 1)

    # Commit order: pass 1 counts the positions first committed at each step, pass 2 gives each its slot (the
    # positions of earlier steps, then the earlier positions of its own step). The new block on the way.
    count = tl.zeros([BLOCK_N], tl.int32)
    last_row = (base + last) * B
    for b0 in range(0, B, BLOCK_B):
        jb = b0 + tl.arange(0, BLOCK_B)
        in_b = jb < B
        first = _first_steps(commit_ptr, base, chain, jb, in_b, i, live, last_depth, B, BLOCK_N)
        count += tl.sum(first.to(tl.int32), axis=1)
        c = tl.load(commit_ptr + last_row + jb, mask=in_b, other=0) != 0
        token = tl.load(tokens_ptr + last_row + jb, mask=in_b, other=0)
        state = tl.load(states_ptr + last_row + jb, mask=in_b, other=0)
        tl.store(new_block_ptr + row * B + jb, tl.where(c, token, state), mask=in_b)
    total = tl.sum(count, axis=0)
    tl.store(num_ptr + row, total.to(tl.int64))
    start = tl.cumsum(count, axis=0) - count  # each step's first slot
    seen = tl.zeros([BLOCK_N], tl.int32)
    for b0 in range(0, B, BLOCK_B):
        jb = b0 + tl.arange(0, BLOCK_B)
        in_b = jb < B
        first = _first_steps(commit_ptr, base, chain, jb, in_b, i, live, last_depth, B, BLOCK_N).to(tl.int32)
        within = tl.cumsum(first, axis=1) - first + seen[:, None]  # earlier positions of the same step
        slot = tl.sum(first * (start[:, None] + within), axis=0)
        committed = tl.sum(first, axis=0) != 0
        tl.store(acc_pos_ptr + row * B + slot, jb.to(tl.int64), mask=in_b & committed)
        tl.store(acc_pos_ptr + row * B + jb, -1, mask=in_b & (jb >= total))
        seen += tl.sum(first, axis=1)


def steps_launch(n, width):
    """(ROUNDS, BLOCK_N, BLOCK_B, num_warps) of verify_steps: [BLOCK_N, BLOCK_B] int64 tiles of at most 2048
    elements, 8 per thread (bench/triton_compile_check.py: 64 per thread spilled)."""
    rounds, block_n, block_b = _row_tiles(n, width, 2048)
    return rounds, block_n, block_b, max(1, min(8, block_n * block_b // 256))


def verify_steps(parents, states, commit, tokens):
    b, n, width = states.shape
    out = _int64_outputs(states.device, (b, width), (b,), (b,), (b, width), (b,))
    if b == 0:
        return out
    rounds, block_n, block_b, warps = steps_launch(n, width)
    with on_device(parents):
        _steps_kernel[(b,)](
            parents.contiguous(), states.contiguous(), commit.contiguous().view(torch.uint8), tokens.contiguous(),
            *out, n, width, ROUNDS=rounds, BLOCK_N=block_n, BLOCK_B=block_b, num_warps=warps,
        )
    return out


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"verify_tree": verify_tree, "verify_steps": verify_steps}
