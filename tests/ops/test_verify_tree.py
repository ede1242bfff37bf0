"""spot::verify_tree: parallel accept/reject of a drafted tree (docs/ops.md, "Parallel verification").

The contract against a recursive brute-force walk on the reference (the oracle), then every other backend against
the reference."""

import random

import pytest
import torch
from torch.library import opcheck

import spot_kernels

from helpers import CPP_KERNELS, I64, gpu_only, random_tree, random_trees


def brute_verify(parents, draft_pos, draft_tokens, target_pos, target_tokens, block):
    """One row by recursive tree walk: (accepted commits [(pos, tok)], new_block, last_node)."""
    n = len(parents)
    children = {i: [c for c in range(1, n) if parents[c] == i] for i in range(n)}

    def walk(i, depth):
        """Deepest accepted node in i's subtree: (depth, -index) is maximised, so ties go to the lowest index."""
        best = (depth, -i)
        if target_pos[i] >= 0:
            for c in children[i]:
                if (draft_pos[c], draft_tokens[c]) == (target_pos[i], target_tokens[i]):
                    best = max(best, walk(c, depth + 1))
        return best

    _, neg_last = walk(0, 0)
    last = -neg_last
    chain = [last]
    while chain[-1] != 0:
        chain.append(parents[chain[-1]])
    chain.reverse()
    commits = [(target_pos[a], target_tokens[a]) for a in chain if target_pos[a] >= 0]
    new_block = list(block)
    for p, t in commits:
        new_block[p] = t
    return commits, new_block, last


def check(parents, draft_pos, draft_tokens, target_pos, target_tokens, block):
    out = spot_kernels.verify_tree(parents, draft_pos, draft_tokens, target_pos, target_tokens, block)
    b, n = parents.shape
    for r in range(b):
        commits, new_block, last = brute_verify(*(t[r].tolist() for t in (parents, draft_pos, draft_tokens,
                                                                          target_pos, target_tokens, block)))
        assert out.last_node[r].item() == last, r
        assert out.num_accepted[r].item() == len(commits), r
        pad = [(-1, -1)] * (n - len(commits))
        assert list(zip(out.accepted_pos[r].tolist(), out.accepted_tokens[r].tolist())) == commits + pad, r
        assert out.new_block[r].tolist() == new_block, r
    return out


def batch(trees, block):
    cols = list(zip(*trees))
    return [torch.tensor(c, dtype=I64) for c in cols] + [torch.tensor(block, dtype=I64)]


@pytest.mark.parametrize("n", [1, 2, 5, 16, 33, 128])
def test_random_trees_against_brute_force(n):
    rng = random.Random(n)
    width = 8
    for _ in range(4):
        trees = [random_tree(rng, n, width) for _ in range(3)]
        blocks = [[rng.randrange(100, 105) for _ in range(width)] for _ in range(3)]
        check(*batch(trees, blocks))


def test_deep_chain_fully_accepted():
    n = 40
    width = n
    parents = [-1] + list(range(n - 1))
    target_pos = list(range(n))
    target_tok = [1000 + i for i in range(n)]
    draft_pos = [0] + target_pos[:-1]
    draft_tok = [0] + target_tok[:-1]
    out = check(*batch([(parents, draft_pos, draft_tok, target_pos, target_tok)], [[7] * width]))
    assert out.num_accepted.tolist() == [n] and out.last_node.tolist() == [n - 1]
    assert out.new_block[0].tolist() == target_tok


def test_hand_built_cases():
    block = [[9, 9, 9, 9, 9, 9]]
    # Root only.
    out = check(*batch([([-1], [0], [0], [2], [5])], block))
    assert out.num_accepted.tolist() == [1] and out.accepted_pos.tolist() == [[2]]
    assert out.new_block.tolist() == [[9, 9, 5, 9, 9, 9]]
    # Root without a commit (no masked position): nothing is accepted below it.
    out = check(*batch([([-1, 0], [0, 3], [0, 4], [-1, 4], [-1, 4])], block))
    assert out.num_accepted.tolist() == [0] and out.last_node.tolist() == [0]
    assert out.new_block.tolist() == block
    # Miss at depth 2: node 2's draft differs from node 1's target commit.
    tree = ([-1, 0, 1, 2], [0, 1, 4, 3], [0, 10, 41, 30], [1, 3, 3, 5], [10, 30, 30, 50])
    out = check(*batch([tree], block))
    assert out.last_node.tolist() == [1] and out.accepted_pos.tolist() == [[1, 3, -1, -1]]
    # Two identical accepted siblings: the deepest tie goes to the lowest index.
    tree = ([-1, 0, 0, 2], [0, 1, 1, 0], [0, 10, 10, 0], [1, 2, 4, 5], [10, 20, 40, 0])
    out = check(*batch([tree], block))
    assert out.last_node.tolist() == [1]
    # An inactive node (parent -1) is never accepted, nor are its children.
    tree = ([-1, -1, 1], [0, 1, 2], [0, 10, 20], [1, 2, 5], [10, 20, 50])
    out = check(*batch([tree], block))
    assert out.last_node.tolist() == [0] and out.num_accepted.tolist() == [1]
    # Last node without a commit of its own: depth commits only.
    tree = ([-1, 0], [0, 1], [0, 10], [1, -1], [10, -1])
    out = check(*batch([tree], block))
    assert out.num_accepted.tolist() == [1] and out.last_node.tolist() == [1]


def test_empty_batch():
    empty = torch.zeros(0, 4, dtype=I64)
    out = spot_kernels.verify_tree(empty, empty, empty, empty, empty, torch.zeros(0, 6, dtype=I64))
    assert [tuple(t.shape) for t in out] == [(0, 4), (0, 4), (0,), (0, 6), (0,)]


def test_outputs_do_not_alias_the_block():
    args = batch([([-1], [0], [0], [1], [3])], [[0, 0]])
    out = spot_kernels.verify_tree(*args)
    out.new_block.fill_(-7)
    assert args[-1].tolist() == [[0, 0]]


def test_opcheck():
    rng = random.Random(0)
    args = batch([random_tree(rng, 9, 6) for _ in range(2)], [[0] * 6, [1] * 6])
    opcheck(torch.ops.spot.verify_tree.default, tuple(args), {"backend": "reference"})
    opcheck(torch.ops.spot.verify_tree.default, tuple(batch([([-1], [0], [0], [-1], [-1])], [[0, 0]])))


def good():
    return batch([([-1, 0, 1], [0, 1, 2], [0, 10, 20], [1, 2, 3], [10, 20, 30])], [[0, 0, 0, 0]])


@pytest.mark.parametrize(
    "index,value,error,match",
    [
        (0, torch.zeros(1, 0, dtype=I64), ValueError, "N >= 1"),
        (0, torch.tensor([[0, 0, 1]]), ValueError, "parents.*root"),
        (0, torch.tensor([[-1, 1, 1]]), ValueError, "parents.*precede"),
        (0, torch.tensor([[-1, 0, 3]]), ValueError, "parents.*precede"),
        (0, torch.tensor([[-1, 0, -2]]), ValueError, "parents"),
        (0, torch.tensor([[-1, 0, 1]], dtype=torch.int32), TypeError, "parents.*int64"),
        (0, torch.tensor([-1, 0, 1]), ValueError, "parents.*2 dimensions"),
        (1, torch.tensor([[0, 4, 2]]), ValueError, "draft_pos"),
        (1, torch.tensor([[0, -1, 2]]), ValueError, "draft_pos"),
        (1, torch.tensor([[0, 1]]), ValueError, "draft_pos.*shape"),
        (2, torch.tensor([[0, 10, -3]]), ValueError, "draft_tokens"),
        (3, torch.tensor([[1, 4, 3]]), ValueError, "target_pos"),
        (3, torch.tensor([[1, -2, 3]]), ValueError, "target_pos"),
        (4, torch.tensor([[10, -1, 30]]), ValueError, "target_tokens"),
        (4, torch.tensor([[10.0, 20.0, 30.0]]), TypeError, "target_tokens"),
        (5, torch.zeros(2, 4, dtype=I64), ValueError, "block"),
        (5, torch.zeros(4, dtype=I64), ValueError, "block.*2 dimensions"),
        (5, torch.zeros(1, 4, dtype=I64, device="meta"), ValueError, "on one device"),
        (2, None, TypeError, "draft_tokens.*Tensor"),
    ],
)
def test_bad_input(index, value, error, match):
    args = good()
    args[index] = value
    with pytest.raises(error, match=match):
        spot_kernels.verify_tree(*args)


def test_inactive_nodes_are_not_range_checked():
    """Padding nodes (parent -1) may carry anything in their draft and target slots."""
    args = batch([([-1, 0, -1], [0, 1, 99], [0, 10, -5], [1, 2, -9], [10, 20, -9])], [[0, 0, 0, 0]])
    assert spot_kernels.verify_tree(*args).num_accepted.tolist() == [2]


@pytest.mark.parametrize(
    "tree,match",
    [
        # node 2 drafts position 1 again, below node 1 which drafted it
        (([-1, 0, 1], [0, 1, 1], [0, 10, 20], [1, 2, 3], [10, 20, 30]),
         r"draft_pos repeats.*node 2 has draft_pos = 1, drafted by its ancestor node 1"),
        # deeper: node 3 repeats the root's child's draft two levels up
        (([-1, 0, 1, 2], [0, 1, 2, 1], [0, 10, 20, 30], [1, 2, 3, 4], [10, 20, 30, 40]),
         r"draft_pos repeats.*node 3 has draft_pos = 1, drafted by its ancestor node 1"),
        # node 1's target commits the position its own draft committed (accepted: 2 commits, 1 block entry)
        (([-1, 0], [0, 1], [0, 10], [1, 1], [10, 20]), r"target_pos is a position already committed.*"
         r"node 1 has target_pos = 1, drafted by node 1 itself"),
        # node 2's target commits the position its ancestor drafted
        (([-1, 0, 1], [0, 1, 2], [0, 10, 20], [1, 2, 1], [10, 20, 30]),
         r"target_pos is a position already committed.*node 2 has target_pos = 1, drafted by its ancestor node 1"),
    ],
)
def test_a_position_committed_twice_on_a_path_is_refused(tree, match):
    """Every block position is committed at most once on a path (docs/ops.md): the check refuses, before any kernel,
    a draft that repeats an ancestor's draft and a target commit onto a position drafted on the node's path."""
    with pytest.raises(ValueError, match=match):
        spot_kernels.verify_tree(*batch([tree], [[0] * 6]))
    n = len(tree[0])
    chain = (list(range(-1, n - 1)), list(range(n)), list(range(n)), list(range(1, n + 1)), list(range(1, n + 1)))
    rows = batch([chain, tree], [[0] * 6] * 2)  # a valid row first: the offending row is named
    with pytest.raises(ValueError, match=match.replace(".*node", ".*row 1, node")):
        torch.ops.spot.verify_tree(*rows)
    assert torch.ops.spot.verify_tree(*batch([chain], [[0] * 6]))[2].tolist() == [n]


def test_item7_verify_tree_rejects_a_position_committed_twice():
    import spot_kernels

    def tree(draft_pos, target_pos):
        t = torch.tensor
        return (t([[-1, 0, 1]]), t([draft_pos]), t([[0, 10, 20]]), t([target_pos]), t([[10, 20, 30]]),
                torch.zeros(1, 4, dtype=torch.int64))

    # (a) node 2 drafts position 1 again, below node 1 which drafted it
    repeated_draft = tree([0, 1, 1], [1, 2, 3])
    # (b) node 1's target commits position 1 onto its own draft: accepted, it gave num_accepted = 2 and one entry
    onto_own = tree([0, 1, 2], [1, 1, 3])
    # (b) node 2's target commits position 1, drafted by its ancestor node 1
    onto_ancestor = tree([0, 1, 2], [1, 2, 1])
    for op in (spot_kernels.verify_tree, torch.ops.spot.verify_tree):
        for backend in ("auto", "reference"):
            with pytest.raises(ValueError, match=r"draft_pos .*node 2 .*ancestor node 1"):
                op(*repeated_draft, backend=backend)
            with pytest.raises(ValueError, match=r"target_pos .*node 1 has target_pos = 1, drafted by node 1 itself"):
                op(*onto_own, backend=backend)
            with pytest.raises(ValueError, match=r"target_pos .*node 2 .*ancestor node 1"):
                op(*onto_ancestor, backend=backend)
            out = op(*tree([0, 1, 2], [1, 2, 3]), backend=backend)  # every position once: accepted whole
            assert out[2].tolist() == [3] and out[3].tolist() == [[0, 10, 20, 30]]


def test_positions_repeat_across_paths_not_along_one():
    """Siblings may draft the same position; a node below an inactive node starts a path of its own (the inactive
    node's draft is not a commit); the root's draft_pos is ignored."""
    tree = ([-1, 0, 0, -1, 3], [4, 1, 1, 2, 2], [0, 10, 11, 0, 20], [1, 2, 2, 5, 3], [10, 20, 20, 0, 30])
    out = check(*batch([tree], [[0] * 6]))
    assert out.last_node.tolist() == [1] and out.num_accepted.tolist() == [2]


@pytest.mark.parametrize("width", [1, 63, 64, 65, 130])
def test_path_check_at_every_word_count(width):
    """The check holds positions as bit sets of 64-position words: valid trees pass at every width, and a position
    committed twice is found in the last word."""
    args = random_trees(8, 40, width, seed=width, hit=0.7)
    spot_kernels.verify_tree(*args)
    last = width - 1
    repeated_draft = ([-1, 0, 1], [0, last, last], [0, 1, 1], [-1, -1, -1], [-1, -1, -1])
    onto_own_draft = ([-1, 0], [0, last], [0, 1], [-1, last], [-1, 1])
    for tree, name in ((repeated_draft, "draft_pos"), (onto_own_draft, "target_pos")):
        with pytest.raises(ValueError, match=f"{name} .*= {last}, drafted by"):
            spot_kernels.verify_tree(*batch([tree], [[0] * width]))


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        spot_kernels.verify_tree(*good(), backend="gpu")


# ------------------------------------------------------------------------------- backends against the reference

@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_verify_matches_reference(backend):
    rng = random.Random(0)
    for n, width, b in ((1, 4, 1), (9, 6, 3), (64, 32, 2), (33, 8, 0), (70, 5, 2)):
        trees = [random_tree(rng, n, width) for _ in range(b)]
        args = [torch.tensor([t[i] for t in trees], dtype=I64).reshape(b, n) for i in range(5)]
        block = torch.randint(0, 9, (b, width))
        a, r = backend.both("verify_tree", *backend.to(*args, block))
        for x, y in zip(a, r):
            assert torch.equal(x, y)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("batch,nodes,block", [(4, 1, 8), (8, 16, 32), (6, 64, 32), (2, 1000, 64), (1, 3000, 16),
                                               (0, 5, 4)])
def test_verify_tree_parity(backend, batch, nodes, block):
    for seed in range(3):
        args = random_trees(batch, nodes, block, seed, hit=0.95 if seed == 0 else 0.6, device=backend.device)
        got, want = backend.run("verify_tree", *args), backend.ref("verify_tree", *args)
        for a, b in zip(got, want):
            assert torch.equal(a, b)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
def test_verify_tree_chain_fully_accepted(backend):
    n, block = 12, 16
    parents = torch.arange(-1, n - 1)[None]
    target_pos = torch.arange(n)[None] % block
    target_tok = torch.arange(n)[None] + 100
    draft_pos = torch.cat([torch.zeros(1, 1, dtype=I64), target_pos[:, :-1]], 1)
    draft_tok = torch.cat([torch.zeros(1, 1, dtype=I64), target_tok[:, :-1]], 1)
    args = backend.to(parents, draft_pos, draft_tok, target_pos, target_tok, torch.zeros(1, block, dtype=I64))
    got = backend.run("verify_tree", *args)
    assert got[2].tolist() == [n] and got[4].tolist() == [n - 1]
    for a, b in zip(got, backend.ref("verify_tree", *args)):
        assert torch.equal(a, b)


@gpu_only
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_verify_tree_at_scale(backend):
    for batch, nodes, width in ((32, 64, 32), (8, 128, 32), (1, 1, 16)):
        args = random_trees(batch, nodes, width, seed=nodes, hit=0.8, p_inactive=0.0, vocab=9, device=backend.device)
        a, r = backend.both("verify_tree", *args)
        for x, y in zip(a, r):
            assert torch.equal(x, y)


# ---------------------------------------------------------------------- the cpu backend (csrc/cpu/) in particular

@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
@pytest.mark.parametrize("shape", [(1, 1, 4), (7, 2, 3), (64, 9, 8), (16, 40, 32), (0, 3, 4)])
def test_verify_tree_random(backend, shape):
    b, n, width = shape
    args = random_trees(b, n, width, seed=b * 1000 + n + 1, hit=0.8, vocab=3)  # seed: every shape accepts some
    out, ref = backend.both("verify_tree", *args)
    out = spot_kernels.VerifyOutput(*out)
    for a, r in zip(out, ref):
        assert a.dtype == r.dtype and a.is_contiguous()
        assert torch.equal(a, r)
    if b:
        assert int(out.num_accepted.max()) >= 1


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_verify_tree_non_contiguous(backend):
    args = random_trees(6, 10, 8, seed=11, hit=0.8, vocab=3)
    strided = tuple(torch.stack([a, a], dim=-1)[..., 0] for a in args)  # same values, stride 2
    assert not strided[0].is_contiguous()
    out = backend.run("verify_tree", *strided)
    ref = backend.ref("verify_tree", *args)
    for a, r in zip(out, ref):
        assert torch.equal(a, r)


# ------------------------------------------------------------------------------------------ verify_steps (rule steps)

def random_step_tree(rng, n, width, mask=99, vocab=4, p_inactive=0.1, p_match=0.6):
    """One row of a step tree as Python lists: (parents, states, commit, tokens). A child is often its parent's
    successor (the parent's state with the parent's commits written in), else the parent with another set committed;
    commits are sets of the node's masked positions (empty sets too, as a quota-0 step)."""
    parents, states, commits, tokens = [], [], [], []
    for i in range(n):
        par = -1 if i == 0 or rng.random() < p_inactive else rng.randrange(i)
        parents.append(par)
        if i == 0:
            state = [mask if rng.random() < 0.8 else rng.randrange(vocab) for _ in range(width)]
        elif par < 0:
            state = list(states[0])  # padding: the root's state
        else:
            base = states[par]
            if rng.random() < p_match:
                state = [t if c else s for s, c, t in zip(base, commits[par], tokens[par])]
            else:
                free = [j for j in range(width) if base[j] == mask]
                pick = set(rng.sample(free, rng.randint(0, len(free)))) if free else set()
                state = [rng.randrange(vocab) if j in pick else s for j, s in enumerate(base)]
        states.append(state)
        free = [j for j in range(width) if state[j] == mask]
        pick = set(rng.sample(free, rng.randint(0, min(len(free), 3)))) if free else set()
        commits.append([j in pick for j in range(width)])
        tokens.append([rng.randrange(vocab) if j in pick else rng.randrange(-1, vocab) for j in range(width)])
    return parents, states, commits, tokens


def brute_verify_steps(parents, states, commits, tokens):
    """One row by recursive walk: (positions in commit order, new block, last node, steps)."""
    n = len(parents)
    succ = [[t if c else s for s, c, t in zip(states[i], commits[i], tokens[i])] for i in range(n)]
    children = {i: [c for c in range(1, n) if parents[c] == i] for i in range(n)}

    def walk(i, depth):
        best = (depth, -i)
        for c in children[i]:
            if states[c] == succ[i]:
                best = max(best, walk(c, depth + 1))
        return best

    depth, neg_last = walk(0, 0)
    chain = [-neg_last]
    while chain[-1] != 0:
        chain.append(parents[chain[-1]])
    chain.reverse()
    order, seen = [], set()
    for a in chain:
        for j in range(len(states[0])):
            if commits[a][j] and j not in seen:
                order.append(j)
                seen.add(j)
    return order, succ[chain[-1]], chain[-1], depth + 1


def check_steps(parents, states, commit, tokens):
    out = spot_kernels.verify_steps(parents, states, commit, tokens)
    b, n, width = states.shape
    for r in range(b):
        order, new_block, last, steps = brute_verify_steps(*(t[r].tolist() for t in (parents, states, commit, tokens)))
        assert out.last_node[r].item() == last, r
        assert out.num_steps[r].item() == steps, r
        assert out.num_accepted[r].item() == len(order), r
        assert out.accepted_pos[r].tolist() == order + [-1] * (width - len(order)), r
        assert out.new_block[r].tolist() == new_block, r
    return out


def step_batch(trees):
    parents, states, commits, tokens = zip(*trees)
    return (torch.tensor(parents, dtype=I64), torch.tensor(states, dtype=I64), torch.tensor(commits),
            torch.tensor(tokens, dtype=I64))


@pytest.mark.parametrize("n", [1, 2, 5, 16, 33])
@pytest.mark.parametrize("width", [1, 6, 40])
def test_verify_steps_against_brute_force(n, width):
    rng = random.Random(n * 100 + width)
    accepted = 0
    for _ in range(6):
        out = check_steps(*step_batch([random_step_tree(rng, n, width) for _ in range(3)]))
        accepted += int((out.num_steps > 1).sum())
    assert n == 1 or accepted > 0  # the draws accept chains


def test_verify_steps_chain_of_steps_fully_accepted():
    """A chain whose every node is its parent's successor is accepted whole: n - 1 drafted steps + the last one."""
    m, width, n = 9, 12, 6
    states, commits, tokens = [[m] * width], [], []
    for i in range(n):
        pick = [j for j in range(width) if j // 2 == i]  # step i commits positions 2i, 2i + 1
        commits.append([j in pick for j in range(width)])
        tokens.append([100 + j for j in range(width)])
        if i + 1 < n:
            states.append([t if c else s for s, c, t in zip(states[-1], commits[-1], tokens[-1])])
    out = check_steps(*step_batch([(list(range(-1, n - 1)), states, commits, tokens)]))
    assert out.num_steps.tolist() == [n] and out.num_accepted.tolist() == [2 * n]
    assert out.accepted_pos[0].tolist() == list(range(2 * n)) + [-1] * (width - 2 * n)


def test_verify_steps_a_wrong_token_or_set_is_rejected():
    m = 9
    root = [m, m, m, m]
    commit0 = [True, True, False, False]
    tok0 = [1, 2, 3, 4]
    right = [1, 2, m, m]
    wrong_token = [1, 3, m, m]
    wrong_set = [1, m, 3, m]
    states = [root, wrong_token, wrong_set, right]
    commits = [commit0, [False] * 4, [False] * 4, [False, False, True, False]]
    tokens = [tok0, [0] * 4, [0] * 4, [0, 0, 7, 0]]
    out = check_steps(*step_batch([([-1, 0, 0, 0], states, commits, tokens)]))
    assert out.last_node.tolist() == [3] and out.new_block[0].tolist() == [1, 2, 7, m]


def test_verify_steps_an_empty_step_is_a_step():
    """A quota-0 step (Dream's first) commits nothing: its successor is the node itself, which a child can be."""
    m = 9
    states = [[m, m], [m, m]]
    commits = [[False, False], [True, False]]
    tokens = [[0, 0], [5, 0]]
    out = check_steps(*step_batch([([-1, 0], states, commits, tokens)]))
    assert out.num_steps.tolist() == [2] and out.new_block[0].tolist() == [5, m]


def test_verify_steps_opcheck():
    rng = random.Random(0)
    opcheck(torch.ops.spot.verify_steps.default, step_batch([random_step_tree(rng, 7, 5) for _ in range(2)]))


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
@pytest.mark.parametrize("batch,nodes,width", [(4, 1, 8), (3, 16, 32), (2, 64, 70), (0, 3, 4), (5, 7, 0)])
def test_verify_steps_backends_equal_the_reference(backend, batch, nodes, width):
    rng = random.Random(batch * 1000 + nodes + width)
    if batch == 0 or width == 0:
        args = (torch.full((batch, nodes), -1, dtype=I64), torch.zeros(batch, nodes, width, dtype=I64),
                torch.zeros(batch, nodes, width, dtype=torch.bool), torch.zeros(batch, nodes, width, dtype=I64))
        args[0][:, 1:] = 0 if nodes > 1 else -1
    else:
        args = step_batch([random_step_tree(rng, nodes, width) for _ in range(batch)])
    got, want = backend.both("verify_steps", *backend.to(*args))
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b.cpu())


def recommit_tree():
    """A chain that commits position 0 twice (verify_steps takes any commit set): it counts once, at its first step,
    and the new block holds the later token; node 2 is inactive, node 3 hangs below it."""
    m = 9
    states = [[m, m, m, m], [5, m, m, m], [m, m, m, m], [m, m, m, m]]
    commits = [[True, False, False, False], [True, False, True, False], [False] * 4, [True] * 4]
    tokens = [[5, 0, 0, 0], [7, 0, 6, 0], [0] * 4, [1, 2, 3, 4]]
    return [-1, 0, -1, 2], states, commits, tokens


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
@pytest.mark.parametrize("case", ["B256", "B12000", "N2000", "non-contiguous", "recommit", "all inactive"])
def test_verify_steps_backends_equal_the_reference_on_edge_cases(backend, case):
    """Wide blocks (several B chunks in Triton; B 12000 and N 2000 move the CUDA kernel's per-row arrays to its global
    workspace), strided views of every input, a position committed twice along the chain, no active child."""
    rng = random.Random(len(case))
    if case == "B256":
        args = step_batch([random_step_tree(rng, 16, 256) for _ in range(3)])
    elif case == "B12000":
        args = step_batch([random_step_tree(rng, 4, 12000, p_inactive=0.0, p_match=0.9) for _ in range(2)])
    elif case == "N2000":
        args = step_batch([random_step_tree(rng, 2000, 8, p_inactive=0.0, p_match=0.9)])
    elif case == "non-contiguous":
        dense = step_batch([random_step_tree(rng, 9, 12) for _ in range(4)])
        args = tuple(torch.stack([a, a], dim=-1)[..., 0] for a in dense)  # same values, every stride doubled
        assert not any(a.is_contiguous() for a in args)
    elif case == "recommit":
        args = step_batch([recommit_tree()])
        out = check_steps(*args)  # against the brute force
        assert out.accepted_pos.tolist() == [[0, 2, -1, -1]] and out.new_block.tolist() == [[7, 9, 6, 9]]
    else:
        args = step_batch([([-1] * 5, [[9] * 6] * 5, [[True] * 6] * 5, [[1] * 6] * 5)] * 2)
    got, want = backend.both("verify_steps", *backend.to(*args))
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b.cpu()), case
    if case in ("B12000", "N2000"):
        assert int(want[2].max()) > 2  # chains accepted
