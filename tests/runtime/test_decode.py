"""Exactness of the decoder (docs/design.md §2.5): every exact method yields the tokens of `standard`, in float64
on CPU."""

import itertools

import pytest
import torch

import spot
import spot_kernels
from spot.decode import generate
from spot.settings import Batching, TreeSettings

from tiny import PROMPTS, sharp_target


@pytest.fixture(scope="module")
def target():
    return sharp_target()


def _run(target, prompts, method, **kw):
    return generate(target, prompts, method, eos_id=None, **kw)


def _max_new(block_size):
    # Two blocks (the second cut short) where that is cheap; one block at B = 32 keeps the suite fast.
    return block_size if block_size == 32 else block_size + block_size // 2


@pytest.mark.parametrize("block_size", [4, 16, 32])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_confidence_equals_standard(target, block_size, temperature):
    """4 prompts x 3 seeds unbatched + 3 batched runs of the 4 prompts, per (B, T): 24 combinations each,
    216 over the grid (docs/design.md §2.5 asks for at least 200)."""
    combos, accepted = 0, 0
    for seed in (0, 1, 2):
        for prompts in [[p] for p in PROMPTS] + [PROMPTS]:  # unbatched, then batched
            rows = [PROMPTS.index(p) for p in prompts]  # noise rows follow the prompt, not the batch slot
            kw = dict(max_new_tokens=_max_new(block_size), block_size=block_size, temperature=temperature,
                      seed=seed, rows=rows, budget=8)
            ref = _run(target, prompts, "standard", **kw)
            out = _run(target, prompts, "confidence", **kw)
            assert out.tokens == ref.tokens, (prompts, seed)
            assert torch.equal(out.orders, ref.orders)
            assert out.stats.target_passes <= ref.stats.target_passes
            accepted += sum(n for c, n in out.stats.commits_per_pass.items() if c > 1)
            combos += len(prompts)
    assert combos == 24
    assert accepted > 0, "no drafted commit was ever accepted: verification would go untested"


def test_oracle_equals_standard(target):
    passes = {"standard": 0, "oracle": 0}
    for block_size, temperature in itertools.product([4, 16, 32], [0.0, 1.0]):
        kw = dict(max_new_tokens=_max_new(block_size), block_size=block_size, temperature=temperature, seed=7)
        ref = _run(target, PROMPTS, "standard", **kw)
        assert ref.stats.target_passes == -(-kw["max_new_tokens"] // block_size) * block_size  # fused appends
        out = _run(target, PROMPTS, "oracle", **kw)
        assert out.tokens == ref.tokens, (block_size, temperature)
        assert out.stats.target_passes <= ref.stats.target_passes
        passes["standard"] += ref.stats.target_passes
        passes["oracle"] += out.stats.target_passes
    assert passes["oracle"] < passes["standard"]


@pytest.mark.parametrize("method", ["confidence", "oracle"])
def test_scoring_the_accepted_chain_equals_scoring_every_node(target, method):
    """CPU decoding scores only the nodes verification can reach; it must match scoring the whole tree, in tokens,
    commit orders, passes and accepted chains, batched and unbatched, at every temperature."""
    accepted = 0
    for block_size, temperature in itertools.product([4, 16], [0.0, 0.7]):
        for prompts in ([PROMPTS[2]], PROMPTS):
            kw = dict(max_new_tokens=_max_new(block_size), block_size=block_size, temperature=temperature, seed=4)
            every = _run(target, prompts, method, tree=TreeSettings(budget=8, score_all_nodes=True), **kw)
            chain = _run(target, prompts, method, tree=TreeSettings(budget=8, score_all_nodes=False), **kw)
            assert chain.tokens == every.tokens and torch.equal(chain.orders, every.orders)
            assert chain.stats.target_passes == every.stats.target_passes
            assert chain.stats.commits_per_pass == every.stats.commits_per_pass
            accepted += sum(n for c, n in chain.stats.commits_per_pass.items() if c > 1)
    assert accepted > 0


def test_batched_equals_unbatched_with_row_ids(target):
    kw = dict(max_new_tokens=8, block_size=4, temperature=1.0, seed=3)
    batched = _run(target, PROMPTS, "confidence", **kw)
    for i, p in enumerate(PROMPTS):
        single = _run(target, [p], "standard", rows=[i], **kw)
        assert single.tokens[0] == batched.tokens[i]


def test_spot_method_with_a_drafter_object(target):
    kw = dict(max_new_tokens=16, block_size=16, temperature=0.7, seed=5)
    ref = _run(target, PROMPTS[:2], "standard", **kw)
    out = _run(target, PROMPTS[:2], "spot", drafter=spot.ConfidenceDrafter(), **kw)
    assert out.tokens == ref.tokens


def test_broken_acceptance_rule_is_caught(target, monkeypatch):
    """Accepting a child whose position matches but whose token differs must break exactness."""
    real = spot_kernels.verify_tree

    def accept_on_position_only(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, **kw):
        parent = parents.clamp_min(0)
        same_pos = (parents >= 0) & (draft_pos == target_pos.gather(1, parent))
        forged = torch.where(same_pos, target_tokens.gather(1, parent), draft_tokens)
        return real(parents, draft_pos, forged, target_pos, target_tokens, block, **kw)

    # every node scored: scoring only the accepted chain would leave the forged child without a commit of its own
    kw = dict(max_new_tokens=32, block_size=16, temperature=1.0, seed=0, tree=TreeSettings(score_all_nodes=True))
    ref = _run(target, PROMPTS, "standard", **kw)
    assert _run(target, PROMPTS, "confidence", **kw).tokens == ref.tokens
    monkeypatch.setattr(spot_kernels, "verify_tree", accept_on_position_only)
    assert _run(target, PROMPTS, "confidence", **kw).tokens != ref.tokens


def test_eos_stops_and_cuts(target):
    ref = generate(target, PROMPTS, "standard", max_new_tokens=24, block_size=4, seed=1, temperature=1.0,
                   eos_id=None)
    eos = ref.tokens[0][5]  # pretend a token that occurs is the end-of-sequence id
    out = generate(target, PROMPTS, "confidence", max_new_tokens=24, block_size=4, seed=1, temperature=1.0,
                   eos_id=eos)
    for full, cut in zip(ref.tokens, out.tokens):
        expected = full[: full.index(eos) + 1] if eos in full else full
        assert cut == expected


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_eos_ends_the_block_early_and_exactly(target, block_size, temperature):
    """Once a block holds end-of-sequence with every position before it committed, its row stops spending
    passes: every method still returns the tokens of the uncut run cut at the first end-of-sequence, and
    standard decoding (one prompt at a time) needs fewer passes than when it decodes the rest of the block."""
    saved = 0
    for i, prompt in enumerate(PROMPTS):
        kw = dict(max_new_tokens=2 * block_size, block_size=block_size, temperature=temperature, seed=3, rows=[i])
        tokens = generate(target, [prompt], "standard", eos_id=None, **kw).tokens[0]
        for at in range(0, block_size, max(1, block_size // 4)):
            eos = tokens[at]  # an id that occurs in the first block plays end-of-sequence
            expected = tokens[: tokens.index(eos) + 1]
            runs = {m: generate(target, [prompt], m, eos_id=eos, budget=8, drafter=spot.ConfidenceDrafter(), **kw)
                    for m in ("standard", "confidence", "oracle")}
            for method, out in runs.items():
                assert out.tokens == [expected], (method, i, at)
                assert out.stats.generated_tokens == len(expected)
            # standard without the stop: the whole block of the end-of-sequence token, one pass per position
            blocks_reached = -(-len(expected) // block_size)
            assert runs["standard"].stats.target_passes <= blocks_reached * block_size
            saved += blocks_reached * block_size - runs["standard"].stats.target_passes
    assert saved > 0, "no block ended early: the stop went untested"


def test_stats_are_consistent(target):
    out = _run(target, PROMPTS, "confidence", max_new_tokens=16, block_size=16, temperature=0.0)
    s = out.stats
    assert s.generated_tokens == 4 * 16
    assert sum(c * n for c, n in s.commits_per_pass.items()) == 4 * 16  # every commit counted once per row
    assert s.passes_per_token == s.target_passes / s.generated_tokens
    assert s.seconds > 0


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(method="greedy"), ValueError, "method"),
    (dict(max_new_tokens=-1), ValueError, "max_new_tokens"),
    (dict(block_size=0), ValueError, "block_size"),
    (dict(budget=0), ValueError, "budget"),
    (dict(temperature=-0.5), ValueError, "temperature"),
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(confidence="entropy"), ValueError, "confidence"),
    (dict(method="spot"), ValueError, "drafter"),
    (dict(prompts=[[1, 2, 97]]), ValueError, "prompts[0]"),
    (dict(prompts=[[1.5]]), TypeError, "prompts[0]"),
    (dict(prompts="hello"), TypeError, "prompts"),
    (dict(block_size=2.0), TypeError, "block_size"),
    (dict(rows=[0, 1]), ValueError, "rows"),
    (dict(drafter=object(), method="spot"), TypeError, "drafter"),
])
def test_bad_arguments(target, kwargs, exc, word):
    args = dict(prompts=[[1, 2, 3]], method="standard")
    args.update(kwargs)
    with pytest.raises(exc, match=word.replace("[", r"\[").replace("]", r"\]")):
        generate(target, args.pop("prompts"), args.pop("method"), **args)


@pytest.mark.parametrize("kind, fields, exc, message", [
    (TreeSettings, dict(budget=0), ValueError, "TreeSettings.budget: expected >= 1, got 0"),
    (TreeSettings, dict(width=True), TypeError, "TreeSettings.width: expected an int, got a bool"),
    (TreeSettings, dict(width=0), ValueError, "TreeSettings.width: expected >= 1, got 0"),
    (TreeSettings, dict(branch=0), ValueError, "TreeSettings.branch: expected >= 1, got 0"),
    (TreeSettings, dict(branch=2.0), TypeError, "TreeSettings.branch: expected an int, got float"),
    (TreeSettings, dict(static=1), TypeError, "TreeSettings.static: expected None or a bool, got int"),
    (TreeSettings, dict(score_all_nodes="yes"), TypeError, "TreeSettings.score_all_nodes: expected None or a bool"),
    (TreeSettings, dict(compile=""), TypeError, "TreeSettings.compile: expected None or a torch.compile backend"),
    (TreeSettings, dict(compile=3), TypeError, "TreeSettings.compile: expected None or a torch.compile backend"),
    (TreeSettings, dict(compile="inductor", static=False), ValueError,
     "TreeSettings.compile: a compiled round is a static one"),
    (Batching, dict(max_batch=0), ValueError, "Batching.max_batch: expected None or >= 1, got 0"),
    (Batching, dict(max_batch="2"), TypeError, "Batching.max_batch: expected an int, got str"),
    (Batching, dict(lockstep=1), TypeError, "Batching.lockstep: expected a bool, got int"),
])
def test_settings_objects_refuse_a_bad_field_by_name(kind, fields, exc, message):
    with pytest.raises(exc, match=message.replace(".", r"\.")):
        kind(**fields)


def test_settings_objects_are_frozen_and_resolve_their_defaults():
    import dataclasses

    import numpy as np

    tree = TreeSettings(budget=np.int64(4), branch=np.int32(2))
    assert tree.budget == 4 and type(tree.budget) is int and type(tree.branch) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        tree.budget = 5
    cpu, accelerator = torch.device("cpu"), torch.device("meta")
    assert TreeSettings().resolved(None, cpu) == TreeSettings(16, spot.tree.WIDTH, spot.tree.BRANCH,
                                                              static=False, score_all_nodes=False, probes=0)
    assert TreeSettings().resolved(None, accelerator) == TreeSettings(16, spot.tree.WIDTH, spot.tree.BRANCH,
                                                                      static=True, score_all_nodes=True, probes=0)
    assert TreeSettings(compile="inductor").resolved(None, cpu).static is True
    assert TreeSettings(static=False, score_all_nodes=True).resolved(None, accelerator) == \
        TreeSettings(16, spot.tree.WIDTH, spot.tree.BRANCH, static=False, score_all_nodes=True, probes=0)

    class Drafter:
        branch = 6

    assert TreeSettings().resolved(Drafter(), cpu).branch == 6 and TreeSettings(branch=3).resolved(
        Drafter(), cpu).branch == 3
    assert Batching() == Batching(max_batch=None, lockstep=False)


def test_generate_reads_its_settings_objects(target):
    """budget= is tree.budget's shortcut (given, it replaces the tree's); a settings object of the wrong kind is
    refused by its argument's name."""
    kw = dict(max_new_tokens=16, block_size=8, temperature=0.7, seed=2)
    runs = {"budget=4": _run(target, PROMPTS, "confidence", budget=4, **kw),
            "tree": _run(target, PROMPTS, "confidence", tree=TreeSettings(budget=4), **kw),
            "both": _run(target, PROMPTS, "confidence", tree=TreeSettings(budget=16), budget=4, **kw)}
    root_alone = _run(target, PROMPTS, "confidence", tree=TreeSettings(budget=1), **kw)
    standard = _run(target, PROMPTS, "standard", **kw)
    for name, out in runs.items():
        assert out.tokens == standard.tokens, name
        assert out.stats.commits_per_pass == runs["tree"].stats.commits_per_pass, name
    assert runs["tree"].stats.target_passes < root_alone.stats.target_passes == standard.stats.target_passes
    with pytest.raises(TypeError, match="tree: expected a spot.TreeSettings or None, got dict"):
        generate(target, PROMPTS, "standard", tree={"budget": 4})
    with pytest.raises(TypeError, match="batching: expected a spot.Batching or None, got TreeSettings"):
        generate(target, PROMPTS, "standard", batching=TreeSettings())
    with pytest.raises(ValueError, match="budget: expected >= 1, got 0"):
        generate(target, PROMPTS, "standard", tree=TreeSettings(budget=4), budget=0)


def test_target_type_checked():
    with pytest.raises(TypeError, match="target"):
        generate(object(), [[1]], "standard")


def test_zero_new_tokens(target):
    out = generate(target, PROMPTS, "confidence", max_new_tokens=0)
    assert out.tokens == [[], [], [], []] and out.stats.target_passes == 0


def test_empty_prompt_is_allowed(target):
    ref = _run(target, [[]], "standard", max_new_tokens=4, block_size=4)
    out = _run(target, [[]], "confidence", max_new_tokens=4, block_size=4)
    assert out.tokens == ref.tokens and len(ref.tokens[0]) == 4


class DeclaredLimits(spot.ConfidenceDrafter):
    """A drafter that is no LearnedDrafter and declares the protocol's limits: the decoder reads those, not a model's
    config."""

    def __init__(self, max_block=None, token_vocab=None):
        self.max_block, self.token_vocab = max_block, token_vocab


def test_the_decoder_reads_a_drafters_declared_limits(target):
    kw = dict(max_new_tokens=16, block_size=16, budget=4, eos_id=None)
    with pytest.raises(ValueError, match="exceeds the drafter's max_block 8"):
        generate(target, PROMPTS[:1], "spot", drafter=DeclaredLimits(max_block=8), **kw)
    with pytest.raises(ValueError, match="token ids of a 5-token vocabulary"):
        generate(target, PROMPTS[:1], "spot", drafter=DeclaredLimits(token_vocab=5), **kw)
    ok = generate(target, PROMPTS[:1], "spot", drafter=DeclaredLimits(16, target.vocab_size), **kw)
    assert ok.tokens == generate(target, PROMPTS[:1], "standard", **kw).tokens
