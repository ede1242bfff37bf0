"""Commit rules (docs/rules.md): the string form, `standard` with a rule against a plain per-step loop of that rule on
the Session API, and every speculative method over a rule token-identical to `standard` with it (float64 on CPU)."""

import itertools
import math

import pytest
import torch

import spot
import spot_kernels
from spot.decode import generate
from spot.rules import CommitRule, NotACommitRule, parse_rule
from spot.settings import TreeSettings

from tiny import PROMPTS, sharp_target

# thresholds this test target's confidences cross at T 0 to 1 (test_a_rule_commits_several_positions_per_step)
RULES = ["steps:4", "threshold:0.15", "threshold:0.15,cmp:ge", "threshold:0.15,steps:4", "factor:2.0", "dream:4",
         "dream:4,alg:entropy"]


@pytest.fixture(scope="module")
def target():
    return sharp_target()


# ------------------------------------------------------------------------------------------------ the string form

@pytest.mark.parametrize("text", ["one", "steps:16", "threshold:0.9", "threshold:0.95,steps:32",
                                  "threshold:0.9,cmp:ge", "factor:1.0", "dream:128", "dream:64,alg:entropy",
                                  "dream:8,alg:topk_margin,eps:0.01"])
def test_a_rule_prints_as_it_parses(text):
    rule = parse_rule(text)
    assert str(rule) == text and parse_rule(str(rule)) == rule


def test_the_string_form_is_forgiving_about_case_spaces_and_order():
    assert parse_rule(" Steps:4 , THRESHOLD:0.5") == parse_rule("threshold:0.5,steps:4")
    assert parse_rule("threshold:0.5,cmp:gt") == parse_rule("threshold:0.5")
    assert parse_rule(CommitRule("steps", 4)) == parse_rule("steps:4")


@pytest.mark.parametrize("text,match", [
    ("", "empty term"), ("sometimes", "unknown term 'sometimes'"), ("steps", "needs a value"),
    ("steps:0", "must be >= 1"), ("steps:-3", "must be >= 1"), ("steps:two", "expects an integer"),
    ("threshold:0", r"must lie in \(0, 1\)"), ("threshold:1", r"must lie in \(0, 1\)"),
    ("threshold:1.5", r"must lie in \(0, 1\)"), ("threshold:nan", "finite"), ("threshold:-0.1", r"\(0, 1\)"),
    ("factor:0", "must be > 0"), ("one:3", "takes no value"), ("one,steps:4", "expected one of"),
    ("steps:4,steps:8", "given twice"), ("steps:4,cmp:ge", "does not apply to a steps rule"),
    ("threshold:0.5,cmp:lt", "cmp expects gt"), ("dream:4,alg:origin", "alg expects one of"),
    ("dream:4,eps:2", r"eps must lie in \(0, 1\)"), ("factor:1,steps:4", "expected one of"),
])
def test_bad_rules_are_refused_by_name(text, match):
    with pytest.raises(ValueError, match=match):
        parse_rule(text)


@pytest.mark.parametrize("text", ["threshold:0.7,editing_threshold:0.5", "edit:0.5", "remask", "joint_threshold:0.5"])
def test_a_rule_that_rewrites_committed_tokens_is_not_a_commit_rule(text):
    with pytest.raises(NotACommitRule, match="rewrites committed tokens"):
        parse_rule(text)


def test_a_rule_must_fit_the_block_before_any_pass(target):
    calls = []

    class Counting(spot.ConfidenceDrafter):
        def position_logits(self, *a, **k):
            calls.append(1)
            return super().position_logits(*a, **k)

    with pytest.raises(ValueError, match="exceed the block size 4"):
        generate(target, PROMPTS[:1], "spot", drafter=Counting(), max_new_tokens=8, block_size=4, rule="steps:5")
    with pytest.raises(TypeError, match="rule: expected a string"):
        generate(target, PROMPTS[:1], "standard", max_new_tokens=8, block_size=4, rule=4)
    with pytest.raises(ValueError, match="names no sampler default"):
        generate(target, PROMPTS[:1], "standard", max_new_tokens=8, block_size=4, rule="family")
    with pytest.raises(ValueError, match="computes its confidence as 'neg_entropy'"):
        generate(target, PROMPTS[:1], "standard", max_new_tokens=8, block_size=4, rule="dream:4,alg:entropy",
                 confidence="margin")
    assert not calls and target.passes_made == 0 if hasattr(target, "passes_made") else not calls


def test_the_tables_follow_each_samplers_definition():
    # LLaDA's split: B // N per step, the remainder to the first steps
    assert parse_rule("steps:3").tables(8, "cpu").quota[:, 8].tolist() == [3, 3, 2]
    # Dream's schedule at steps = block: nothing at the first step, two at the last (float32 timesteps)
    q = parse_rule("dream:32").tables(32, "cpu").quota
    walk, n = [], 32
    for i in range(32):
        walk.append(min(int(q[i, n]), n))
        n -= walk[-1]
    assert walk[0] == 0 and walk[-1] == 2 and sum(walk) == 32
    # Fast-dLLM's factor rule: rank r >= 1 passes at c >= 1 - F / (r + 2); rank 0 and the last rank always pass
    t = parse_rule("factor:1.0").tables(4, "cpu").thresholds
    assert t[4].tolist() == [-math.inf, 1 - 1 / 3, 1 - 1 / 4, -math.inf]


# ------------------------------------------------------------------------------------ standard is the rule's sampler

def per_step_loop(target, prompts, rule, *, max_new_tokens, block_size, temperature, seed, confidence="prob"):
    """The rule's sampler as a user would write it on the Session API, one step per pass: score the block, commit
    what spot_kernels.commit_rule says (the rule's own confidence kind), repeat; no tree, no decoder."""
    tables = parse_rule(rule).tables(block_size, "cpu")
    confidence = parse_rule(rule).confidence or confidence
    out = []
    for row, prompt in enumerate(prompts):
        session = target.start([prompt], max_new_tokens, block_size)
        tokens = []
        for _ in range(-(-max_new_tokens // block_size)):
            block = torch.full((1, block_size), target.mask_id)
            step = 0
            while (block == target.mask_id).any():
                logits = session.score(block[:, None]).clone()
                logits[..., target.mask_id] = -math.inf
                masked = block == target.mask_id
                scored = spot_kernels.score(logits, masked[:, None], seed, torch.tensor([[row]]),
                                            session.block_start[:, None], torch.tensor([[step]]), temperature,
                                            confidence=confidence)
                commit = spot_kernels.commit_rule(scored.confidence, masked[:, None], torch.tensor([[step]]),
                                                  tables.quota, tables.thresholds, tables.inclusive)
                block = torch.where(commit[:, 0], scored.tokens[:, 0], block)
                step += 1
            session.append(block)
            tokens += block[0].tolist()
        out.append(tokens[:max_new_tokens])
    return out


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_standard_with_a_rule_is_the_rules_per_step_loop(target, rule, temperature):
    kw = dict(max_new_tokens=12, block_size=8, temperature=temperature, seed=3)
    want = per_step_loop(target, PROMPTS, rule, **kw)
    out = generate(target, PROMPTS, "standard", eos_id=None, rule=rule, **kw)
    assert out.tokens == want


def test_a_rule_commits_several_positions_per_step_on_this_target(target):
    """The test target's confidences do cross the thresholds the tests use, so the threshold rules are exercised."""
    for rule in ("threshold:0.15", "threshold:0.15,steps:4", "factor:2.0"):
        sizes = set()
        for temperature in (0.0, 1.0):
            out = generate(target, PROMPTS, "standard", eos_id=None, rule=rule, max_new_tokens=16, block_size=8,
                           temperature=temperature)
            sizes |= set(out.stats.commits_per_pass)
        assert max(sizes) > 1 and len(sizes) > 1, (rule, sizes)  # several, and not always as many


# ---------------------------------------------------------------------------------- speculation over a rule is exact

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_speculation_over_a_rule_equals_standard(target, rule, temperature):
    """confidence, spot (a drafter object) and oracle over the rule: the tokens and commit orders of standard with
    it, in no more passes, batched and unbatched, two block sizes, two seeds; drafted steps are accepted."""
    drafter = spot.ConfidenceDrafter()
    accepted = 0
    for block_size, seed in itertools.product([4, 8], [0, 1]):
        if rule.startswith("dream") and block_size < 4:
            continue
        for prompts in ([PROMPTS[1]], PROMPTS):
            rows = [PROMPTS.index(p) for p in prompts]
            kw = dict(max_new_tokens=block_size + block_size // 2, block_size=block_size, temperature=temperature,
                      seed=seed, rows=rows, rule=rule, eos_id=None)
            ref = generate(target, prompts, "standard", **kw)
            for method in ("confidence", "spot", "oracle"):
                out = generate(target, prompts, method, drafter=drafter if method == "spot" else None, budget=8, **kw)
                assert out.tokens == ref.tokens, (method, block_size, seed, prompts)
                assert torch.equal(out.orders, ref.orders)
                assert out.stats.target_passes <= ref.stats.target_passes
                accepted += ref.stats.target_passes - out.stats.target_passes
    assert accepted > 0, "no drafted step was ever accepted: verification would go untested"


@pytest.mark.parametrize("rule", ["steps:4", "threshold:0.15", "dream:4"])
def test_the_static_round_and_the_cpu_path_agree_over_a_rule(target, rule):
    """The static round (fixed shapes, no host sync: the GPU path) and the CPU path (early stops, the chain only)
    give the same tokens, orders and passes (a complete node has no children on either: the static tree once
    filled its budget with empty steps past the block's end, and took a pass more at seed 4)."""
    for temperature, seed, max_new_tokens in ((0.0, 2, 12), (1.0, 2, 12), (1.0, 4, 16)):
        kw = dict(max_new_tokens=max_new_tokens, block_size=8, temperature=temperature, seed=seed, rule=rule,
                  eos_id=None)
        static = generate(target, PROMPTS, "confidence", tree=TreeSettings(budget=8, static=True), **kw)
        host = generate(target, PROMPTS, "confidence", tree=TreeSettings(budget=8, static=False,
                                                                          score_all_nodes=False), **kw)
        every = generate(target, PROMPTS, "confidence", tree=TreeSettings(budget=8, static=False,
                                                                           score_all_nodes=True), **kw)
        assert static.tokens == host.tokens == every.tokens
        assert torch.equal(static.orders, host.orders) and torch.equal(host.orders, every.orders)
        assert static.stats.target_passes == host.stats.target_passes == every.stats.target_passes


def test_rule_one_is_the_default_and_changes_nothing(target):
    kw = dict(max_new_tokens=12, block_size=8, temperature=0.7, seed=1, eos_id=None, budget=8)
    for method in ("standard", "confidence"):
        a = generate(target, PROMPTS, method, **kw)
        b = generate(target, PROMPTS, method, rule="one", **kw)
        assert a.tokens == b.tokens and torch.equal(a.orders, b.orders)
        assert a.stats.target_passes == b.stats.target_passes and a.stats.commits_per_pass == b.stats.commits_per_pass


def test_orders_list_each_steps_positions_together(target):
    """With a rule, `orders` still lists a block's positions in commit order: step by step, each step's positions
    ascending."""
    out = generate(target, PROMPTS[:1], "standard", eos_id=None, rule="steps:2", max_new_tokens=8, block_size=8)
    order = out.orders[0, 0].tolist()
    assert sorted(order) == list(range(8))
    assert all(order[i] < order[i + 1] for i in range(0, 8, 2))


def test_the_oracle_ranks_a_rules_steps_in_their_order(target):
    """Over a rule the oracle ranks every pending position by its place in standard's order, so each node's next
    step is the first m ranks (the first one alone would make no set of two); committed positions are ineligible."""
    std = generate(target, PROMPTS[:1], "standard", eos_id=None, rule="steps:2", max_new_tokens=8, block_size=8)
    order = std.orders[0, 0]
    oracle = spot.OracleDrafter(std.orders, ranked=True)
    masked = torch.ones(2, 8, dtype=torch.bool)
    masked[1, order[:4]] = False  # a node after two steps
    stale = spot.StaleFeatures(torch.zeros(1, 8, 4), torch.zeros(1, 8, 4, dtype=torch.long),
                               torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8), masked[:1], torch.zeros(
                                   1, dtype=torch.long), 0)
    logits = oracle.position_logits(stale, masked, torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    for node, first in ((0, 0), (1, 4)):
        ranked = torch.sort(logits[node], descending=True, stable=True).indices
        assert set(ranked[:2].tolist()) == set(order[first:first + 2].tolist())
        assert ranked[:8 - first].tolist() == order[first:].tolist()
    assert torch.isinf(logits[1, order[:4]]).all() and torch.isfinite(logits[1, order[4:]]).all()
    # one commit per step keeps its chain: the first pending position alone
    one = spot.OracleDrafter(std.orders).position_logits(stale, masked, torch.zeros(2, dtype=torch.long),
                                                         torch.zeros(2, dtype=torch.long))
    assert torch.isfinite(one).sum(1).tolist() == [1, 1]


# ----------------------------------------------------------------------------------------------------------- probes

def test_probes_default_to_rules_whose_steps_commit_several_positions():
    from spot.round import RoundConfig
    from spot.tree import default_probes

    cpu = torch.device("cpu")

    def probes(rule, budget=16, B=32):
        return TreeSettings(budget=budget).resolved(None, cpu, parse_rule(rule).tables(B, cpu)).probes

    assert [probes("steps:16", budget) for budget in (4, 7, 8, 14, 15, 16, 32)] == [0, 0, 1, 1, 2, 2, 2]
    assert probes("threshold:0.95,steps:16") == 2 and probes("dream:16") == 2
    # one commit per step, a threshold's own sizes, Dream's schedule at one step per position: none
    assert probes("steps:32") == probes("threshold:0.9") == probes("factor:1.0") == probes("dream:32") == 0
    assert TreeSettings().resolved(None, cpu).probes == 0 == default_probes(None, 16)
    assert TreeSettings(probes=0).resolved(None, cpu).probes == 0
    assert TreeSettings(probes=5).resolved(None, cpu, parse_rule("threshold:0.9").tables(32, cpu)).probes == 5
    with pytest.raises(ValueError, match="TreeSettings.probes: 2 probes, but rule='one'"):
        TreeSettings(probes=2).resolved(None, cpu)
    for bad in (-1, 16):
        with pytest.raises(ValueError, match="TreeSettings.probes: expected 0 <= probes < budget"):
            TreeSettings(budget=16, probes=bad)
    with pytest.raises(TypeError, match="TreeSettings.probes"):
        TreeSettings(probes=True)
    with pytest.raises(ValueError, match="RoundConfig.probes"):
        RoundConfig(2, 0, 0.0, budget=8, probes=1)


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_rules_tree_ends_with_its_probes(static, temperature):
    """The last `probes` nodes are children of the root, each the root with one position committed: the drafter's
    i-th ranked masked position, with the token a drafted child takes there (drafters.resampled_tokens). A row that
    is not drafted gets padding there; the static tree keeps exactly `budget` slots."""
    from spot.drafters import resampled_tokens
    from spot.round import RoundConfig
    from spot.tree import grow_tree

    b, B, K, mask = 3, 8, 4, 2
    g = torch.Generator().manual_seed(int(temperature * 10) + static)
    probs = torch.rand(b, B, K, generator=g, dtype=torch.float64).softmax(-1).sort(-1, descending=True).values
    ids = torch.randint(3, 60, (b, B, K), generator=g)
    stale = spot.StaleFeatures(probs, ids, ids[..., 0], probs[..., 0], torch.ones(b, B, dtype=torch.bool),
                               torch.arange(b) * 100, 0)
    root = torch.full((b, B), mask)
    root[1, :3] = 9
    step = torch.tensor([0, 1, 0])
    rows = torch.arange(b) + 5
    cfg = RoundConfig(mask, 7, temperature, budget=8, width=2, branch=3, static=static,
                      rule=parse_rule("steps:4").tables(B, "cpu"), probes=2)
    tree = grow_tree(root, step, stale, spot.ConfidenceDrafter(), cfg, rows=rows,
                     draft_rows=torch.tensor([True, True, False]))
    if static:
        assert tree.states.shape[1] == cfg.budget
    probes = slice(-2, None)
    scores = torch.where(root == mask, probs[..., 0], -1.0)  # ConfidenceDrafter: the stale confidence's order
    ranked = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :2]
    tokens = resampled_tokens(probs, ids, 7, rows, stale.block_start, step, temperature)
    for row in (0, 1):
        assert tree.parents[row, probes].tolist() == [0, 0] and tree.depth[row, probes].tolist() == [1, 1]
        for i, state in enumerate(tree.states[row, probes]):
            changed = torch.nonzero(state != root[row]).flatten().tolist()
            assert changed == [int(ranked[row, i])]
            assert state[changed[0]] == tokens[row, changed[0]]
    assert tree.parents[2].tolist() == [-1] * tree.states.shape[1]  # not drafted: the root and padding
    assert (tree.states[2] == root[2]).all()
    # the drafted nodes before the probes hold whole steps (two commits each, as far as the block goes), the
    # probes one
    commits = (tree.states != root[:, None]).sum(2)[:2, :-2]
    whole = torch.minimum(2 * tree.depth[:2, :-2], (root[:2] == mask).sum(1, keepdim=True))
    drafted = tree.parents[:2, :-2] >= 0
    assert torch.equal(commits[drafted], whole[drafted]) and drafted.any()


def test_the_next_tree_is_drafted_from_the_freshest_node():
    """freshest_node: of the nodes whose commits the new block holds, the one with the most; ties to the deepest
    accepted node; a node with a commit the block does not hold (another token, or a position still masked) is
    never it, and neither is padding."""
    from spot.round import freshest_node
    from spot.tree import Tree

    M = 0
    root = torch.tensor([M, M, M, M, M, M])
    states = torch.stack([
        root,                                     # 0 root
        torch.tensor([5, 6, M, M, M, M]),         # 1 a step (accepted)
        torch.tensor([5, M, M, M, M, M]),         # 2 probe: the step's first commit
        torch.tensor([5, 6, 7, M, M, M]),         # 3 probe of node 1: holds a commit of the block's next step
        torch.tensor([5, 6, 8, M, M, M]),         # 4 probe of node 1: another token
        torch.tensor([5, 6, M, M, M, 9]),         # 5 probe of node 1: a position the block leaves masked
        root,                                     # 6 padding
    ])[None]
    tree = Tree(states, torch.tensor([[-1, 0, 0, 1, 1, 1, -1]]), None, None, torch.tensor([[0, 1, 1, 2, 2, 2, 0]]))
    masked = states == M
    block = torch.tensor([[5, 6, 7, 3, M, M]])  # node 1's successor: the step committed positions 2 and 3
    assert freshest_node(tree, masked, block, torch.tensor([1])).tolist() == [3]
    # without node 3: node 1 (two commits) beats the probe of the root (one)
    drop3 = masked.clone()
    drop3[0, 3] = False  # node 3 now commits position 0 "to the mask" nowhere: make it inconsistent instead
    tree3 = Tree(states.clone(), tree.parents, None, None, tree.depth)
    tree3.states[0, 3, 4] = 4
    assert freshest_node(tree3, tree3.states == M, block, torch.tensor([1])).tolist() == [1]
    # the root accepted alone (a block after the root's step): the probe wins over the root, never the padding
    block0 = torch.tensor([[5, M, 2, M, M, M]])
    assert freshest_node(tree, masked, block0, torch.tensor([0])).tolist() == [2]
    block1 = torch.tensor([[1, M, 2, M, M, M]])  # the probe's token is not the block's
    assert freshest_node(tree, masked, block1, torch.tensor([0])).tolist() == [0]


@pytest.mark.parametrize("static,every", [(True, True), (False, True), (False, False)])
def test_probes_seed_the_next_tree_on_every_path(target, static, every):
    """Over steps:4 at B 8 (two commits a step) a pass whose probe holds one of the target's commits drafts the next
    tree from the probe: stale features of an odd number of masked positions, where every step's node has an even
    number. The static round,
    the CPU path scoring every node and the one scoring the chain only (which scores the probe as well) hand the
    same stale features on; without probes no pass does."""
    def run(probes, static=static, every=every):
        seen = []

        def on_pass(block_index, step, stale):
            seen.append((step.clone(), stale.masked.sum(1), stale.topk_probs.clone(), stale.tokens.clone()))

        kw = dict(max_new_tokens=16, block_size=8, temperature=1.0, seed=4, rule="steps:4", eos_id=None)
        out = generate(target, PROMPTS, "confidence", on_pass=on_pass,
                       tree=TreeSettings(budget=8, probes=probes, static=static, score_all_nodes=every), **kw)
        assert out.tokens == generate(target, PROMPTS, "standard", **kw).tokens
        from_probe = sum(int((masked % 2 == 1).sum()) for _, masked, *_ in seen)
        return seen, from_probe

    with_probes, from_probe = run(1)
    assert from_probe > 0
    assert run(0)[1] == 0
    reference, _ = run(1, True, True)
    assert len(reference) == len(with_probes)
    for (s1, m1, p1, t1), (s2, m2, p2, t2) in zip(reference, with_probes):
        assert torch.equal(s1, s2) and torch.equal(m1, m2) and torch.equal(p1, p2) and torch.equal(t1, t2)


# --------------------------------------------------------------------------------------------------- stale top-K

def test_a_rule_at_t_above_0_keeps_a_wider_stale_top_k():
    from spot.drafters import SAMPLED_RULE_TOP_K, TOP_K, default_top_k

    assert default_top_k(False, 1.0) == default_top_k(False, 0.3) == SAMPLED_RULE_TOP_K > TOP_K
    assert default_top_k(False, 0.0) == default_top_k(True, 1.0) == default_top_k(True, 0.0) == TOP_K
    assert default_top_k(False, 1.0, drafts=False) == TOP_K  # standard: nothing drafts from its features


@pytest.mark.parametrize("method,rule,temperature,top_k,expected", [
    ("confidence", "steps:4", 1.0, None, 97),  # min(SAMPLED_RULE_TOP_K, the vocabulary)
    ("confidence", "steps:4", 0.0, None, 32), ("confidence", "one", 1.0, None, 32),
    ("confidence", "steps:4", 1.0, 8, 8), ("standard", "steps:4", 1.0, None, 32)])  # standard drafts nothing
def test_a_decode_drafts_from_its_default_stale_top_k(target, method, rule, temperature, top_k, expected):
    widths = set()
    kw = dict(max_new_tokens=8, block_size=4, temperature=temperature, rule=rule, eos_id=None, budget=8)
    ref = generate(target, PROMPTS, "standard", **kw)
    out = generate(target, PROMPTS, method, top_k=top_k, **kw,
                   on_pass=lambda block_index, step, stale: widths.add(stale.topk_probs.shape[-1]))
    assert widths == {expected} and out.tokens == ref.tokens


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_a_drafted_token_is_the_targets_draw_when_the_stale_top_k_holds_the_vocabulary(temperature):
    """Why a rule at T > 0 keeps a wide top-K: a drafted token (the Gumbel-max over the stale top-K with the step's
    noise) is the token the target draws at that step from the same logits once K is the vocabulary; with a
    narrow K the target's draw often lies outside it at a flat position, and the drafted token is another."""
    from spot.drafters import resampled_tokens

    g = torch.Generator().manual_seed(3)
    n, B, V = 4, 8, 97
    logits = torch.randn(n, B, V, generator=g, dtype=torch.float64) * 0.5  # flat: the tail carries the mass
    masked = torch.ones(n, B, dtype=torch.bool)
    rows, start, steps = torch.arange(n), torch.tensor([0, 8, 16, 3]), torch.tensor([2, 1, 5, 1])
    drawn = spot_kernels.score(logits, masked, 7, rows, start, steps, temperature, top_k=V).tokens

    def drafted(k):
        out = spot_kernels.score(logits, masked, 7, rows, start, steps - 1, temperature, top_k=k)  # another step
        return resampled_tokens(out.topk_probs, out.topk_ids, 7, rows, start, steps, temperature)

    assert torch.equal(drafted(V), drawn)
    assert (drafted(4) != drawn).float().mean() > 0.5  # 0.84 and 0.88 at T 0.7 and 1
