"""SDAR's attention in the embedded model (`ModelConfig.prefix_attention="block"`): committed blocks see themselves
and every earlier block, blocks sit at absolute positions k * B, a prompt's last len % B tokens open its first block.
The session's passes are checked against a dense forward with that mask, and every method against `standard`, in
float64."""

import dataclasses

import pytest
import torch

import spot
from spot.model import BlockDiffusionLM
from spot.prompts import held_out_prompts
from spot.settings import Batching
from spot.target import ModelTarget
from tiny import TINY

B = 4
MASK = TINY.mask_id
PROMPTS = [[5, 9, 14], [7] * 11, [3, 50, 60, 70, 80, 90, 11, 12], [42], [8, 9, 10, 11, 12, 13]]


def block_target(seed=0, scale=0.3, dtype=torch.float64):
    torch.manual_seed(seed)
    model = BlockDiffusionLM(dataclasses.replace(TINY, prefix_attention="block"))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, scale)
    return ModelTarget(model.to(dtype))


def _dense_block_reference(model, committed, block):
    """No cache, no tree: SDAR's mask over [committed tokens, current block] at positions 0.., the committed tokens
    whole blocks of B, each seeing its own and earlier blocks, the current block seeing everything."""
    ids = torch.tensor([committed + block])
    n, p = len(committed) + len(block), len(committed)
    q, k = torch.arange(n)[:, None], torch.arange(n)[None, :]
    mask = (k // B <= q // B) | (q >= p)
    return model(ids, torch.arange(n)[None], mask[None, None])[0, p:]


def test_passes_equal_a_dense_forward_with_sdars_mask():
    target = block_target()
    prompt = [5, 6, 7, 8, 9, 10]  # one whole block in the prefix, two tokens opening the first block
    session = target.start([prompt], max_new_tokens=8, block_size=B)
    assert session.prompt_head == [2] and session.block_start.tolist() == [4]
    first = session.initial_block(B)
    assert first.tolist() == [[9, 10, MASK, MASK]]
    block = [9, 10, 2, 31]
    logits = session.score(torch.tensor([[block]]))[0, 0]
    torch.testing.assert_close(logits, _dense_block_reference(target.model, prompt[:4], block), rtol=1e-10,
                               atol=1e-10)
    # the finished block joins the prefix inside the next pass, block-causally (its first token sees its last)
    done = [9, 10, 17, 31]
    session.append(torch.tensor([done]))
    nxt = session.score(torch.tensor([[[MASK] * B]]))[0, 0]
    torch.testing.assert_close(nxt, _dense_block_reference(target.model, prompt[:4] + done, [MASK] * B),
                               rtol=1e-10, atol=1e-10)
    causal = dataclasses.replace(target.model.cfg, prefix_attention="causal")  # the mask is what changed
    target.model.cfg = causal
    other = target.start([prompt], max_new_tokens=8, block_size=B)
    assert other.prompt_head is None and other.initial_block(B) is None


def test_rows_of_other_lengths_and_left_padding_are_invisible():
    target = block_target()
    node = torch.tensor([MASK, 13, MASK, MASK])
    batched = target.start(PROMPTS, 8, B)
    heads = batched.initial_block(B)
    nodes = torch.where(heads == MASK, node, heads)[:, None]
    together = batched.score(nodes)
    for i, p in enumerate(PROMPTS):
        alone = target.start([p], 8, B)
        torch.testing.assert_close(together[i], alone.score(nodes[i:i + 1])[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("rule", ["one", "threshold:0.5", "steps:2"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_method_returns_standards_tokens(rule, temperature):
    target = block_target()
    kw = dict(max_new_tokens=10, block_size=B, temperature=temperature, seed=3, rule=rule, eos_id=None)
    standard = spot.generate(target, PROMPTS, "standard", **kw)
    for method in ("confidence", "oracle"):
        out = spot.generate(target, PROMPTS, method, budget=8, **kw)
        assert out.tokens == standard.tokens, method
    streamed = spot.generate(target, PROMPTS, "confidence", budget=8, batching=Batching(max_batch=2), **kw)
    assert streamed.tokens == standard.tokens
    for method in ("standard", "confidence"):  # lock-step: rows start their later blocks together, without heads
        lock = spot.generate(target, PROMPTS, method, budget=8, batching=Batching(lockstep=True), **kw)
        assert lock.tokens == standard.tokens, method
    for i, p in enumerate(PROMPTS):  # each prompt alone (its row's noise): the tokens follow the prompt
        alone = spot.generate(target, [p], "standard", rows=torch.tensor([i]), **kw)
        assert alone.tokens[0] == standard.tokens[i] and len(alone.tokens[0]) == 10


def test_the_output_is_a_greedy_block_loop_on_the_dense_mask():
    """standard (one commit per pass, T 0) is the plain loop: fill a block by committing its most confident masked
    position, the dense forward above giving the logits."""
    target = block_target(seed=1)
    prompt, new = PROMPTS[2] + [4], 9  # 9 tokens: two whole blocks, one token opens the first block
    committed, head = prompt[:8], prompt[8:]
    out, block = [], head + [MASK] * (B - len(head))
    while len(out) < new:
        while MASK in block:
            probs = _dense_block_reference(target.model, committed, block).softmax(-1)
            conf, tok = probs.max(-1)
            masked = torch.tensor([t == MASK for t in block])
            j = int(torch.where(masked, conf, torch.tensor(-1.0, dtype=conf.dtype)).argmax())
            block[j] = int(tok[j])
        committed += block
        out += block
        block = [MASK] * B
    expected = out[len(head):][:new]
    assert spot.generate(target, [prompt], "standard", max_new_tokens=new, block_size=B, eos_id=None).tokens[0] \
        == expected


def test_an_end_of_sequence_token_in_a_prompts_head_is_refused():
    target = block_target()
    with pytest.raises(ValueError, match="end-of-sequence"):
        target.start([[5, 6, 7, 8, 9, TINY.eos_id]], 8, B)


@pytest.mark.parametrize("dtype, rule, temperature", [("float64", "threshold:0.9", 1.0), ("float32", "one", 0.0)])
@pytest.mark.parametrize("drafter", ["default", "portable"])
def test_the_shipped_default_target_decodes_exactly_in_fewer_passes(dtype, rule, temperature, drafter):
    target = spot.load_target(dtype=dtype)
    assert target.model.cfg.prefix_attention == "block" and target.aligned_blocks
    ids = [target.tokenizer.encode(t) for t in held_out_prompts(2)]
    kw = dict(max_new_tokens=32, block_size=32, temperature=temperature, seed=2, eos_id=None, rule=rule)
    ref = spot.generate(target, ids, "standard", **kw)
    out = spot.generate(target, ids, "spot", drafter=spot.load_drafter(drafter), budget=16, **kw)
    assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)
    assert out.stats.target_passes < ref.stats.target_passes
