"""SPOT as an SGLang dLLM algorithm (docs/serving.md), on CPU.

- the tree batch layout: the flat custom mask against the dense `spot_kernels.tree_mask`, positions, B-aligned
  segments, K/V slots; one tree forward of a paged-cache model equals N separate block forwards under that mask;
- `SpotDriver` (the code of `Spot.run`) against a fake model runner and fake forward batches in a miniature FDFO
  scheduler: tokens equal `spot.generate(..., "standard")` on the same model at T in {0, 1} in fewer forwards, and
  do not change when requests are reordered between rounds;
- with SGLang importable: the real `Spot` class with real `ForwardBatch`es (return contract, the same tokens), the
  built-in `LowConfidence` at one commit per step giving the same tokens at T = 0, the plug-in registration, and
  the launch / request refusals. Without SGLang these skip, saying so.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sglang_fakes import FakeRunner, Request, TinyLM, WindowTarget, make_batch, serve

import spot
import spot_kernels
from spot.sglang.driver import SpotDriver
from spot.sglang.layout import (active_nodes, flat_tree_mask, node_logits, tree_cache_loc, tree_layout,
                                tree_positions, tree_tokens)
from spot.sglang.rounds import SpotOptions, noise_row


@functools.cache
def _sglang_missing() -> str | None:
    """Import SGLang (without its CUDA kernel packages, as the README's set-up installs it) once, on first use, and
    undo what its import does to the process's environment variables (cache directories) and warning filters, so
    the rest of the suite runs as without it. Returns why it is not importable, or None."""
    try:
        _import_quietly("sglang.srt.dllm.algorithm.base")
        return None
    except Exception as e:  # noqa: BLE001 - any import failure means the same here: no usable SGLang
        return (f"sglang 0.5.23 is not importable ({type(e).__name__}: {e}); `make install` installs it "
                "(docs/serving.md)")


def _import_quietly(name: str):
    """Import an SGLang module, then restore the environment variables and warning filters its import changed."""
    env, filters = dict(os.environ), warnings.filters[:]
    try:
        return importlib.import_module(name)
    finally:
        os.environ.clear()
        os.environ.update(env)
        warnings.filters[:] = filters


@pytest.fixture
def sglang():
    """Skips the test, saying why, where SGLang is not importable."""
    reason = _sglang_missing()
    if reason is not None:
        pytest.skip(reason)


B = 8
PROMPTS = {"req-a": [3, 14, 15, 9, 2], "req-b": [27, 18, 28, 18, 2, 8, 4, 5, 9, 0, 4], "req-c": list(range(1, 9))}
MAX_NEW = 24
RATIOS = {}  # (method, T) -> (spot forwards, standard forwards), reported at the end of the module


class Driver(SpotDriver):
    """`Spot` without SGLang's base class: the same run() / round code."""

    def __init__(self, mask_id: int, config: dict, fdfo: bool = True):
        self.block_size, self.mask_id, self.fdfo = B, mask_id, fdfo
        self.init_spot(config)


def _requests():
    return [Request(rid, p, MAX_NEW, i) for i, (rid, p) in enumerate(PROMPTS.items())]


def _reference(model: TinyLM, T: float, seed: int) -> dict:
    """spot.generate(..., "standard") per request: one commit per pass, noise row from the rid."""
    out = {}
    for rid, prompt in PROMPTS.items():
        target = WindowTarget(model, prompt, MAX_NEW, B)
        spot.generate(target, [prompt], "standard", max_new_tokens=target.x.shape[1] - target.first * B,
                      block_size=B, temperature=T, seed=seed, rows=[noise_row(rid)], eos_id=None,
                      allow_partial_block=True)
        out[rid] = target.x[0, len(prompt):len(prompt) + MAX_NEW].tolist()
    return out


def _serve(algo, model, T, *, real=False, shuffle_seed=None, contract=None):
    runner = FakeRunner(model)
    tokens = serve(algo, runner, _requests(), B, model.mask_id, {rid: T for rid in PROMPTS}, real=real,
                   shuffle_seed=shuffle_seed, contract=contract)
    return tokens, runner


# -- the layout ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix,nodes,bsz", [([5, 0, 3], [2, 1, 3], 4), ([0], [1], 1), ([17, 32], [16, 5], 8)])
def test_flat_mask_matches_dense_tree_mask(prefix, nodes, bsz):
    mask, indptr = flat_tree_mask(prefix, nodes, bsz)
    assert mask.dtype == torch.bool and indptr.tolist()[-1] == mask.numel()
    for r, (p, n) in enumerate(zip(prefix, nodes)):
        dense = spot_kernels.tree_mask(torch.zeros(1, dtype=torch.long), p, 0, n, bsz)[0, 0]
        assert torch.equal(mask[indptr[r]:indptr[r + 1]].view(n * bsz, p + n * bsz), dense)


def test_layout_positions_segments_and_slots():
    layout = tree_layout([8, 0, 16], [40, 0, 16], [3, 1, 2], 8)
    assert layout.token_indptr.tolist() == [0, 24, 32, 48]
    assert all(x % 8 == 0 for x in layout.token_indptr.tolist())  # B-aligned: LLaDA2 routes by token_index // B
    assert layout.positions.tolist() == tree_positions([40, 0, 16], [3, 1, 2], 8).tolist()
    assert layout.positions[:24].tolist() == list(range(40, 48)) * 3
    block_loc = torch.arange(1, 25).view(3, 8)
    loc = tree_cache_loc(block_loc, [3, 1, 2])
    assert loc[:8].tolist() == list(range(1, 9)) and (loc[8:24] == 0).all()  # root -> the block's slots, rest -> pad
    assert loc[24:32].tolist() == list(range(9, 17)) and loc[32:40].tolist() == list(range(17, 25))
    assert (loc[40:] == 0).all()
    states = torch.arange(3 * 3 * 8).view(3, 3, 8)
    flat = tree_tokens(states, [3, 1, 2])
    assert flat.tolist() == states[0].reshape(-1).tolist() + states[1, 0].tolist() + states[2, :2].reshape(-1).tolist()
    logits = node_logits(flat.double()[:, None].expand(-1, 5), [3, 1, 2], 8, 3, fill=-7.0)
    assert torch.equal(logits[..., 0].long()[0], states[0]) and (logits[1, 1:] == -7).all()
    assert active_nodes(torch.tensor([[-1, 0, 0, -1], [-1, -1, -1, -1]])) == [3, 1]
    with pytest.raises(ValueError, match="num_nodes"):
        flat_tree_mask([0], [0], 8)


def test_tree_forward_equals_separate_block_forwards():
    """One forward over N node copies (repeated positions, the flat mask, node K/V to the pad slot) gives each node
    the logits of a forward of that node alone, and leaves the root's K/V in the block's slots."""
    model = TinyLM()
    runner = FakeRunner(model)
    prompt = list(range(1, 17))  # two prompt blocks
    runner.req_to_token[0, :24] = torch.arange(1, 25)
    for blk in range(2):  # prefill, block by block
        fb = make_batch(prompt[blk * B:(blk + 1) * B], list(range(blk * B, blk * B + B)),
                        list(range(1 + blk * B, 1 + blk * B + B)), [0], [blk * B], ["r"], [0.0], B, real=False)
        runner.forward(fb)
    g = torch.Generator().manual_seed(1)
    nodes = torch.randint(0, model.vocab, (1, 5, B), generator=g)
    nodes[0, 0] = model.mask_id
    layout = tree_layout([16], [16], [5], B)
    fb = make_batch(nodes[0, 0].tolist(), list(range(16, 24)), list(range(17, 25)), [0], [16], ["r"], [0.0], B,
                    real=False)
    driver = Driver(model.mask_id, {})
    tb = driver._tree_batch(fb, tree_tokens(nodes, [5]), layout)
    driver._plan_attention(runner, tb, layout)
    tree_logits = runner.forward(tb).logits_output.full_logits.view(5, B, -1)
    for n in range(5):
        alone = make_batch(nodes[0, n].tolist(), list(range(16, 24)), [0] * B, [0], [16], ["r"], [0.0], B,
                           real=False)
        separate = runner.forward(alone).logits_output.full_logits
        torch.testing.assert_close(tree_logits[n], separate, rtol=0, atol=1e-12)
    # Only the root reached the block's slots: its K/V there equal those of the root forwarded alone elsewhere.
    root = make_batch(nodes[0, 0].tolist(), list(range(16, 24)), list(range(100, 108)), [0], [16], ["r"], [0.0], B,
                      real=False)
    runner.forward(root)
    for layer in range(model.layers):
        torch.testing.assert_close(runner.k[layer][17:25], runner.k[layer][100:108], rtol=0, atol=1e-12)


def test_sglangs_triton_extend_kernel_reads_the_tree_mask(sglang):
    """SGLang's own Triton extend-attention kernel (interpreted on a CPU), handed the flat mask and mask_indptr of a
    tree batch over a paged prefix, gives every node the attention of that node alone; without the mask the nodes
    see each other."""
    kernel = _import_quietly("sglang.kernels.ops.attention.extend_attention").extend_attention_fwd
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype, tol = (torch.float16, 2e-2) if dev == "cuda" else (torch.float32, 1e-5)
    g = torch.Generator().manual_seed(0)
    H, D, bsz, prefix, nodes = 2, 16, 4, [5, 3], [3, 2]
    layout = tree_layout(prefix, [5, 3], nodes, bsz, device=dev)
    kv_indices = torch.arange(1, 1 + sum(prefix), device=dev)  # slot 0 is the padding slot
    kv_indptr = torch.tensor([0, prefix[0], sum(prefix)], dtype=torch.int32, device=dev)
    rand = lambda *shape: torch.randn(*shape, generator=g).to(dev, dtype)  # noqa: E731
    kbuf, vbuf = rand(sum(prefix) + 1, H, D), rand(sum(prefix) + 1, H, D)
    q, k, v = (rand(layout.num_tokens, H, D) for _ in range(3))
    qo = layout.token_indptr.to(torch.int32)

    def attend(mask, indptr):
        o = torch.empty_like(q)
        kernel(q, k, v, o, kbuf, vbuf, qo, kv_indptr, kv_indices, mask, False, indptr, max(layout.extend_lens),
               1.0, 1.0, sm_scale=D ** -0.5, extend_seq_lens_cpu=layout.extend_lens)
        return o.float()

    def alone(r, j):
        slots = kv_indices[int(kv_indptr[r]):int(kv_indptr[r + 1])]
        s = int(qo[r]) + j * bsz
        keys, vals = torch.cat((kbuf[slots], k[s:s + bsz])).float(), torch.cat((vbuf[slots], v[s:s + bsz])).float()
        w = (torch.einsum("qhd,khd->hqk", q[s:s + bsz].float(), keys) * D ** -0.5).softmax(-1)
        return torch.einsum("hqk,khd->qhd", w, vals)

    tree, unmasked = attend(layout.custom_mask, layout.mask_indptr), attend(None, None)
    worst_tree = worst_unmasked = 0.0
    for r, n in enumerate(nodes):
        for j in range(n):
            s = int(qo[r]) + j * bsz
            worst_tree = max(worst_tree, (tree[s:s + bsz] - alone(r, j)).abs().max().item())
            worst_unmasked = max(worst_unmasked, (unmasked[s:s + bsz] - alone(r, j)).abs().max().item())
    assert worst_tree < tol and worst_unmasked > 100 * tol


# -- the driver against the reference ---------------------------------------------------------------------------
@pytest.mark.parametrize("T", [0.0, 1.0])
def test_driver_matches_standard_in_fewer_forwards(T):
    model = TinyLM()
    reference = _reference(model, T, seed=5)
    spot_tokens, spot_runner = _serve(Driver(model.mask_id, {"seed": 5, "budget": 8}), model, T)
    std_tokens, std_runner = _serve(Driver(model.mask_id, {"seed": 5, "drafter": "none"}), model, T)
    assert std_tokens == reference, "one commit per forward through the SGLang loop must be `standard`"
    assert spot_tokens == reference
    assert spot_runner.forwards < std_runner.forwards
    RATIOS[("confidence", T)] = (spot_runner.forwards, std_runner.forwards)


def test_a_learned_drafter_from_a_directory(tmp_path):
    """drafter: DIR loads an order drafter (a random portable one: no token buckets, resampled features, which read
    the noise coordinates the round hands it); the tokens stay standard's."""
    from spot.order_model import OrderModel, OrderModelConfig, save_order_model

    torch.manual_seed(0)
    save_order_model(OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, top_k=8,
                                                 resampled=True)), tmp_path / "drafter")
    model = TinyLM()
    driver = Driver(model.mask_id, {"seed": 5, "budget": 8, "top_k": 8, "drafter": str(tmp_path / "drafter")})
    tokens, runner = _serve(driver, model, 1.0)
    assert tokens == _reference(model, 1.0, seed=5)
    assert type(driver.drafter).__name__ == "LearnedDrafter" and any(max(e) > B for _, e in runner.batches)


def test_results_do_not_depend_on_request_order():
    model = TinyLM()
    driver = lambda: Driver(model.mask_id, {"seed": 2, "budget": 8})  # noqa: E731
    base, _ = _serve(driver(), model, 1.0)
    for shuffle in (1, 2, 3):
        tokens, _ = _serve(driver(), model, 1.0, shuffle_seed=shuffle)
        assert tokens == base, f"request order (shuffle {shuffle}) changed the tokens"


def test_tree_token_cap_keeps_tokens_and_bounds_forwards():
    """max_tree_tokens cuts trees to fit one forward (never below the roots) and changes no token."""
    model = TinyLM()
    reference = _reference(model, 1.0, seed=5)
    tokens, runner = _serve(Driver(model.mask_id, {"seed": 5, "budget": 8, "max_tree_tokens": 3 * 2 * B}), model, 1.0)
    assert tokens == reference
    assert max(n for n, _ in runner.batches) <= 3 * 2 * B and any(max(ext) == 2 * B for _, ext in runner.batches)


def test_noise_rows_follow_the_request_id():
    assert noise_row("req-a") == noise_row("req-a") != noise_row("req-b")
    assert 0 <= noise_row("x" * 1000) < 2**32


def test_a_rule_option_is_checked():
    with pytest.raises(ValueError, match="Spot: rule 'threshold:2'"):
        SpotOptions.from_mapping({"rule": "threshold:2"})
    with pytest.raises(ValueError, match="rewrites committed tokens"):
        SpotOptions.from_mapping({"rule": "threshold:0.5,editing:0.5"})


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown"):
        SpotOptions.from_mapping({"budgett": 4})
    with pytest.raises(ValueError, match="budget"):
        SpotOptions.from_mapping({"budget": 0})
    with pytest.raises(ValueError, match="temperature"):
        SpotOptions.from_mapping({"temperature": -1})
    assert SpotOptions.from_mapping({"block_size": 32, "budget": 4}).budget == 4
    # branch: the drafter's own unless given (spot.tree.tree_branch), else an int >= 1
    assert SpotOptions.from_mapping({}).branch is None and SpotOptions.from_mapping({"branch": 8}).branch == 8
    with pytest.raises(ValueError, match="branch"):
        SpotOptions.from_mapping({"branch": 0})
    # top_k: generate's default per rule and temperature (spot.drafters.default_top_k) where a drafter drafts,
    # unless given
    from spot.drafters import SAMPLED_RULE_TOP_K, TOP_K, ConfidenceDrafter
    from spot.sglang.rounds import round_config

    def top_k(mapping, temperature, drafter=ConfidenceDrafter(resampled=True)):
        return round_config(SpotOptions.from_mapping(mapping), drafter, temperature, 0, 8, "cpu").top_k

    assert top_k({"rule": "threshold:0.95"}, 1.0) == SAMPLED_RULE_TOP_K
    assert top_k({"rule": "threshold:0.95"}, 0.0) == top_k({}, 1.0) == TOP_K
    assert top_k({"rule": "threshold:0.95"}, 1.0, drafter=None) == TOP_K  # drafter "none": nothing drafts
    assert top_k({"rule": "threshold:0.95", "top_k": 16}, 1.0) == 16
    with pytest.raises(ValueError, match="top_k"):
        SpotOptions.from_mapping({"top_k": 0})
    # probes: the rule's default (spot.tree.default_probes) unless given; a partial step needs a rule
    assert round_config(SpotOptions.from_mapping({"rule": "steps:4"}), None, 1.0, 0, 8, "cpu").probes == 2
    assert round_config(SpotOptions.from_mapping({"rule": "steps:4", "probes": 1}), None, 1.0, 0, 8, "cpu").probes == 1
    assert round_config(SpotOptions.from_mapping({"rule": "threshold:0.9"}), None, 1.0, 0, 8, "cpu").probes == 0
    for bad, match in (({"probes": -1}, "probes must be"), ({"probes": 16}, "probes must be"),
                       ({"probes": True}, "probes must be"), ({"probes": 1}, "needs a commit rule")):
        with pytest.raises(ValueError, match=match):
            SpotOptions.from_mapping(bad)


def test_sync_mode_decodes_a_block_in_one_call():
    """--no-dllm-fdfo: one run() call finishes every block of the batch (SGLang's synchronous contract)."""
    model = TinyLM()
    runner = FakeRunner(model)
    runner.req_to_token[0, :8] = torch.arange(1, 9)
    runner.req_to_token[1, :8] = torch.arange(9, 17)
    ids = [5, 6, 7] + [model.mask_id] * 5 + [model.mask_id] * 8
    fb = make_batch(ids, list(range(8)) * 2, list(range(1, 17)), [0, 1], [0, 0], ["p", "q"], [0.0, 0.0], B,
                    real=False)
    _, next_ids, accept, states, _ = Driver(model.mask_id, {}, fdfo=False).run(runner, fb, None)
    assert accept is None and states is None
    assert [len(x) for x in next_ids] == [5, 8]
    assert model.mask_id not in torch.cat(next_ids).tolist()


def test_tensor_parallel_ranks_take_rank_0s_tree(monkeypatch):
    """With a TP group of 2, a rank's own draft tree is replaced by rank 0's (the broadcast), unpadded again."""
    import spot.sglang.driver as driver_module
    from spot.tree import Tree

    def tree(seed, n):
        g = torch.Generator().manual_seed(seed)
        parents = torch.tensor([[-1] + list(range(n - 1))] * 2)
        parents[1, 2:] = -1  # the second request has fewer nodes: padding
        return Tree(torch.randint(0, 9, (2, n, B), generator=g), parents,
                    torch.randint(0, B, (2, n), generator=g), torch.randint(0, 9, (2, n), generator=g),
                    torch.arange(n).repeat(2, 1))

    rank0, mine = tree(0, 4), tree(1, 3)
    sent = {}

    class Rank0:  # packs rank 0's tree through the same code and keeps what it would send
        world_size = 2

        def broadcast(self, packed, src=0):
            sent["packed"] = packed.clone()
            return packed

    class OtherRank:  # receives it
        world_size = 2

        def broadcast(self, packed, src=0):
            assert src == 0 and packed.shape == sent["packed"].shape
            return packed.copy_(sent["packed"])

    d = Driver(39, {"budget": 5})
    monkeypatch.setattr(driver_module, "_tp_group", lambda: Rank0())
    assert d._broadcast_tree(rank0) is not None
    monkeypatch.setattr(driver_module, "_tp_group", lambda: OtherRank())
    got = d._broadcast_tree(mine)
    assert got.parents.shape == (2, 4)
    for name in ("parents", "positions", "tokens", "depth"):
        assert torch.equal(getattr(got, name)[0], getattr(rank0, name)[0]), name
    assert torch.equal(got.states[0], rank0.states[0])
    assert torch.equal(got.parents[1, :2], rank0.parents[1, :2]) and (got.parents[1, 2:] == -1).all()


# -- the real Spot class (SGLang importable) ---------------------------------------------------------------------
def _spot(mask_id: int, config: dict):
    from sglang.srt.dllm.config import DllmConfig

    from spot.sglang.algorithm import Spot

    return Spot(DllmConfig("Spot", config, B, mask_id, 8, first_done_first_out_mode=True))


def _check_contract(result, fb, bsz):
    logits_output, next_ids, accept, states, can_run_graph = result
    bs = fb.batch_size
    assert logits_output.full_logits.shape[0] == bs * bsz  # the roots' rows, as a one-block forward returns
    assert len(next_ids) == bs and all(len(x) == bsz for x in next_ids)
    assert len(accept) == bs and set(accept) <= {0, bsz}
    assert len(states) == bs and all((s is None) == (a == bsz) for s, a in zip(states, accept))
    assert all(s is None or s.rid == rid for s, rid in zip(states, fb.rids))
    assert isinstance(can_run_graph, bool)


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_spot_run_contract_layout_and_tokens(sglang, T):
    model = TinyLM()
    algo = _spot(model.mask_id, {"seed": 5, "budget": 8})
    tokens, runner = _serve(algo, model, T, real=True, contract=_check_contract)
    assert tokens == _reference(model, T, seed=5)
    assert all(n % B == 0 and all(e % B == 0 for e in ext) for n, ext in runner.batches)  # B-aligned segments
    assert any(max(ext) > B for _, ext in runner.batches), "no forward scored more than the root"
    shuffled, _ = _serve(_spot(model.mask_id, {"seed": 5, "budget": 8}), model, T, real=True, shuffle_seed=7)
    assert shuffled == tokens


def test_low_confidence_one_commit_per_step_gives_the_same_tokens(sglang):
    """SGLang's built-in LowConfidence with a threshold no confidence exceeds commits one position per step (its
    top-1 fallback); at T = 0 it is the project's `standard`, so Spot must return its tokens."""
    from sglang.srt.dllm.algorithm.low_confidence import LowConfidence
    from sglang.srt.dllm.config import DllmConfig

    model = TinyLM()
    low = LowConfidence(DllmConfig("LowConfidence", {"threshold": 1.0}, B, model.mask_id, 8,
                                   first_done_first_out_mode=True))
    low_tokens, low_runner = _serve(low, model, 0.0, real=True, contract=None)
    spot_tokens, spot_runner = _serve(_spot(model.mask_id, {"budget": 8}), model, 0.0, real=True)
    assert spot_tokens == low_tokens
    assert spot_runner.forwards < low_runner.forwards
    RATIOS[("vs LowConfidence", 0.0)] = (spot_runner.forwards, low_runner.forwards)


@pytest.mark.parametrize("threshold", [0.95, 0.5])
def test_spot_speculates_sglangs_low_confidence_rule(sglang, threshold):
    """SGLang's LowConfidence at its default threshold 0.95 (and 0.5, where it commits more per step): every masked
    position above the threshold, else the most confident, from float32 logits at T = 0. Spot with the same rule
    (`threshold:T`, strict) returns its tokens in fewer forwards; Spot without a drafter is that rule, forward for
    forward."""
    from sglang.srt.dllm.algorithm.low_confidence import LowConfidence
    from sglang.srt.dllm.config import DllmConfig

    model = TinyLM()
    low = LowConfidence(DllmConfig("LowConfidence", {"threshold": threshold}, B, model.mask_id, 8,
                                   first_done_first_out_mode=True))
    low_tokens, low_runner = _serve(low, model, 0.0, real=True, contract=None)
    rule = {"budget": 8, "rule": f"threshold:{threshold}"}
    plain_tokens, plain_runner = _serve(_spot(model.mask_id, {**rule, "drafter": "none"}), model, 0.0, real=True)
    spot_tokens, spot_runner = _serve(_spot(model.mask_id, rule), model, 0.0, real=True, contract=_check_contract)
    assert plain_tokens == low_tokens and plain_runner.forwards == low_runner.forwards
    assert spot_tokens == low_tokens
    assert spot_runner.forwards < low_runner.forwards
    RATIOS[(f"vs LowConfidence {threshold}", 0.0)] = (spot_runner.forwards, low_runner.forwards)


def test_plugin_registers_spot_with_sglang(sglang):
    import tomllib

    from sglang.srt.dllm import algorithm as algorithms
    from sglang.srt.plugins.hook_registry import HookRegistry

    import spot.sglang as plugin
    from spot.sglang.algorithm import Spot

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    entry = project["project"]["entry-points"]["sglang.srt.plugins"]["spot"]
    assert entry == "spot.sglang:register" and "sglang" in project["project"]["optional-dependencies"]
    plugin.register()
    HookRegistry.apply_hooks()
    assert algorithms.get_algorithm_cls("Spot") is Spot
    assert algorithms.get_algorithm_cls("LowConfidence").__name__ == "LowConfidence"
    with pytest.raises(RuntimeError, match="Unknown diffusion LLM algorithm"):
        algorithms.get_algorithm_cls("NoSuchAlgorithm")


def test_sglang_worker_runs_spot_and_logs_forwards(sglang, tmp_path, monkeypatch):
    """SGLang's own TpModelWorker._forward_batch_generation_dllm (the caller of run()) over Spot and the fake
    runner, with the plug-in's forward log (SPOT_SGLANG_FORWARD_LOG, what bench/sglang_check.py counts with)."""
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.plugins.hook_registry import HookRegistry

    import spot.sglang as plugin

    log = tmp_path / "forwards.log"
    monkeypatch.setenv("SPOT_SGLANG_FORWARD_LOG", str(log))
    plugin.register()
    HookRegistry.apply_hooks()
    model = TinyLM()
    runner = FakeRunner(model)
    runner.req_to_token[0, :8] = torch.arange(1, 9)
    fb = make_batch([5, 6, 7] + [model.mask_id] * 5, list(range(8)), list(range(1, 9)), [0], [0], ["w"], [0.0], B,
                    real=True)
    worker = SimpleNamespace(dllm_algorithm=_spot(model.mask_id, {}), model_runner=runner)
    batch = SimpleNamespace(reqs=[SimpleNamespace(dllm_algo_state=None)])
    result = TpModelWorker._forward_batch_generation_dllm(worker, fb, batch)
    assert result.accept_length_per_req_cpu == [0] and result.dllm_algo_state[0].rid == "w"
    assert len(result.next_token_ids[0]) == B and result.next_token_ids[0].count(model.mask_id) == 4
    assert log.read_text() == "Spot 1\n"


def test_sglang_plugin_loader_finds_the_entry_point(sglang, tmp_path):
    """In a fresh process (as each SGLang process is), `load_plugins()` reads the entry point from installed
    metadata and `--dllm-algorithm Spot` then resolves. The metadata here is a stand-in dist-info carrying this
    project's entry point, so the test does not depend on how the package was installed."""
    import subprocess
    import sys
    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    group = project["project"]["entry-points"]["sglang.srt.plugins"]
    info = tmp_path / "spot_plugin_probe-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spot-plugin-probe\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[sglang.srt.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in group.items()))
    code = ("from sglang.srt.plugins import load_plugins; load_plugins(); "
            "from sglang.srt.dllm.algorithm import get_algorithm_cls; print(get_algorithm_cls('Spot').__module__)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "spot.sglang.algorithm"


def _request(**changes):
    sp = dict(frequency_penalty=0.0, presence_penalty=0.0, repetition_penalty=1.0, min_p=0.0, top_p=1.0, top_k=1,
              sampling_seed=None, min_new_tokens=0, logit_bias=None, json_schema=None, regex=None, ebnf=None,
              structural_tag=None)
    req = dict(return_logprob=False, logprob=SimpleNamespace(top_logprobs_num=0, token_ids_logprob=None),
               custom_logit_processor=None, grammar=None, origin_input_ids=[1, 2, 3],
               dllm_config=SimpleNamespace(mask_id=39))
    for k, v in changes.items():
        (sp if k in sp else req)[k] = v
    return SimpleNamespace(sampling_params=SimpleNamespace(**sp), **req)


def test_requests_spot_cannot_serve_exactly_are_refused(sglang):
    from spot.sglang.algorithm import Spot

    assert Spot.validate_request(_request()) is None
    assert Spot.validate_request(_request(top_k=1 << 30)) is None
    for change, word in ((dict(return_logprob=True), "return_logprob"), (dict(top_p=0.9), "top_p"),
                         (dict(json_schema="{}"), "json_schema"), (dict(grammar=object()), "grammar"),
                         (dict(top_k=20), "top_k"), (dict(origin_input_ids=[1, 39]), "mask token")):
        message = Spot.validate_request(_request(**change))
        assert message is not None and word in message and "Spot" in message


def test_launch_settings_spot_cannot_serve_are_refused(sglang, monkeypatch):
    from sglang.srt.arg_groups import overrides

    from spot.sglang.algorithm import Spot

    declared = {}
    monkeypatch.setattr(overrides, "declare_resolution", lambda args, source, **f: declared.update(f))

    def settings(attention=None, graphs="disabled", dp=False):
        graph = SimpleNamespace(decode=SimpleNamespace(backend=graphs), prefill=SimpleNamespace(backend="disabled"))
        view = SimpleNamespace(attention_backend=attention, prefill_attention_backend=None,
                               decode_attention_backend=None, cuda_graph_config=graph, enable_dp_attention=dp)
        monkeypatch.setattr(overrides, "resolving_view", lambda args: view)

    settings()
    Spot.configure_server_args(object())
    assert declared == {"attention_backend": "triton"}
    settings(attention="triton")
    Spot.configure_server_args(object())
    for kwargs, word in ((dict(attention="flashinfer"), "--attention-backend triton"),
                         (dict(attention="triton", graphs="full"), "--disable-decode-cuda-graph"),
                         (dict(attention="triton", dp=True), "dp-attention")):
        settings(**kwargs)
        with pytest.raises(ValueError, match=word):
            Spot.configure_server_args(object())


def test_launch_refusals_through_sglangs_own_argument_resolution(sglang, tmp_path):
    """ServerArgs.resolve_once (device cpu, a config-only SDAR-shaped checkpoint) reaches Spot.configure_server_args
    through SGLang's dLLM hook: the defaults (flashinfer with CUDA graphs) are refused, the documented flags pass."""
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.server_args import ServerArgs

    import spot.sglang as plugin

    plugin.register()
    HookRegistry.apply_hooks()
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["SDARForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 32, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "torch_dtype": "float32"}))
    common = dict(model_path=str(tmp_path), dllm_algorithm="Spot", device="cpu", dtype="float32",
                  skip_tokenizer_init=True, log_level="error")
    env = dict(os.environ)  # the resolution sets a few environment variables: undone below
    try:
        args = ServerArgs(**common)
        with pytest.raises(ValueError, match="--attention-backend triton.*--disable-decode-cuda-graph"):
            args.resolve_once()
        args = ServerArgs(**common, attention_backend="triton", disable_decode_cuda_graph=True,
                          disable_prefill_cuda_graph=True)
        args.resolve_once()
        assert args.attention_backend == "triton"
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_report_forward_ratios():
    """Prints the forward counts the tests above measured (docs/serving.md quotes them): pytest -s."""
    for (method, T), (s, ref) in sorted(RATIOS.items()):
        print(f"\nSPOT-on-SGLang fake runner, {method}, T={T}: {s} forwards vs {ref} ({s / ref:.3f})")
    assert all(s < ref for s, ref in RATIOS.values())
