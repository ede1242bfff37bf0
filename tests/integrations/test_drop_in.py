"""The ops as drop-in replacements in an existing DLM loop (docs/integrations.md): LLaDA's sampler rewritten with
spot_kernels.score gives the loop's own tokens (T = 0) and spot.generate's over an HFTarget (any T)."""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import hf_tiny  # noqa: E402
import spot  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from llada_loop import llada_generate, llada_generate_with_ops  # noqa: E402

PROMPTS = torch.tensor([[5, 9, 14, 20, 33], [7, 8, 40, 41, 42]])


def bidirectional(model):
    @torch.no_grad()
    def forward(x):
        visible = torch.ones(x.shape[0], 1, x.shape[1], x.shape[1], dtype=torch.bool)
        return model(x, attention_mask=visible).logits
    return forward


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("gen_length,block_length", [(16, 4), (16, 16), (24, 8)])
def test_llada_loop_with_ops_equals_the_loop(arch, gen_length, block_length):
    forward = bidirectional(hf_tiny.model(arch, scale=3.0))  # less peaked: the commit order is not trivial
    kwargs = dict(gen_length=gen_length, block_length=block_length, mask_id=hf_tiny.MASK_ID)
    before = llada_generate(forward, PROMPTS, **kwargs)
    after = llada_generate_with_ops(forward, PROMPTS, **kwargs)
    assert torch.equal(before, after)
    assert (before != hf_tiny.MASK_ID).all()


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_llada_loop_with_ops_equals_spot_generate(temperature):
    model = hf_tiny.model("qwen3")
    target = spot.HFTarget(model, "bidirectional", mask_id=hf_tiny.MASK_ID)
    loop = llada_generate_with_ops(bidirectional(model), PROMPTS, gen_length=16, block_length=8,
                                   mask_id=hf_tiny.MASK_ID, temperature=temperature, seed=3)
    for method in ("standard", "confidence"):
        out = spot.generate(target, PROMPTS.tolist(), method, max_new_tokens=16, block_size=8,
                            temperature=temperature, seed=3, eos_id=None)
        assert out.tokens == loop.tolist(), method


# ------------------------------------------------------------------------------ diffusers' LLaDA2Pipeline drop-in

def _pipelines(block_length, cls_names=("LLaDA2Pipeline", "SpotLLaDA2Pipeline")):
    diffusers = pytest.importorskip("diffusers")
    from spot.llada2_pipeline import SpotLLaDA2Pipeline

    model = hf_tiny.LLaDA2StandIn(hf_tiny.model("qwen3", scale=3.0), block_length)
    classes = {"LLaDA2Pipeline": diffusers.LLaDA2Pipeline, "SpotLLaDA2Pipeline": SpotLLaDA2Pipeline}
    pipes = [classes[name](model=model, scheduler=diffusers.BlockRefinementScheduler(block_length=block_length),
                           tokenizer=None) for name in cls_names]
    for p in pipes:
        p.set_progress_bar_config(disable=True)
    return model, pipes


def _drafter():
    from spot.order_model import LearnedDrafter, OrderModel, OrderModelConfig

    torch.manual_seed(0)
    return LearnedDrafter(OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, top_k=8,
                                                      resampled=True)))


def _through_eos(row, eos):
    return row[: row.index(eos) + 1] if eos in row else row


@pytest.mark.parametrize("prompt_length,block_length,gen_length", [(11, 8, 16), (5, 4, 12), (16, 8, 16)])
@pytest.mark.parametrize("eos", [None, 85])
@pytest.mark.parametrize("rule", [dict(num_inference_steps=None, threshold=1.0),  # one commit per step
                                  dict(threshold=0.7),  # the pipeline's defaults, editing off
                                  dict(num_inference_steps=4, threshold=0.3)])  # a quota of 2 or 1 per step
def test_llada2_pipeline_drop_in_equals_the_pipeline(prompt_length, block_length, gen_length, eos, rule):
    """T = 0: the pipeline and the drop-in, called with the same arguments (editing off), give the same tokens
    (through each row's first end-of-sequence token when it stops early), the drop-in's speculative methods in fewer
    model calls."""
    model, (pipe, spot_pipe) = _pipelines(block_length)
    ids = torch.arange(3, 3 + prompt_length)[None].repeat(2, 1)
    ids[1] += 20
    rule = dict(rule, num_inference_steps=rule.get("num_inference_steps", 32) or block_length)
    kw = dict(input_ids=ids, gen_length=gen_length, block_length=block_length, mask_token_id=hf_tiny.MASK_ID,
              eos_token_id=eos if eos is not None else hf_tiny.EOS_ID, eos_early_stop=eos is not None,
              output_type="seq", temperature=0.0, editing_threshold=None, **rule)
    model.calls = 0
    ref = pipe(**kw).sequences.tolist()
    calls = {"pipeline": model.calls}
    for method in ("standard", "confidence", "spot"):
        model.calls = 0
        got = spot_pipe(method=method, drafter=_drafter(), budget=8, **kw).sequences.tolist()
        assert spot_pipe.model_calls == model.calls
        if eos is None:
            assert got == ref, method
        else:
            assert [_through_eos(r, eos) for r in got] == [_through_eos(r, eos) for r in ref], method
        calls[method] = model.calls
    # the pipeline also spends a call on a block its quota emptied early; the drafted methods save passes on top
    assert calls["standard"] <= calls["pipeline"]
    assert calls["spot"] <= calls["standard"] and calls["confidence"] < calls["standard"], calls


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_llada2_drop_in_at_temperature_is_exact_against_coupled_standard(temperature):
    _, (spot_pipe,) = _pipelines(8, ("SpotLLaDA2Pipeline",))
    kw = dict(input_ids=torch.tensor([[5, 9, 14, 20, 33, 40, 41, 42, 43, 44, 45]]), gen_length=16, block_length=8,
              mask_token_id=hf_tiny.MASK_ID, eos_early_stop=False, output_type="seq", temperature=temperature,
              seed=5, editing_threshold=None)
    ref = spot_pipe(method="standard", **kw).sequences
    standard_calls = spot_pipe.model_calls
    for method in ("confidence", "spot"):
        assert torch.equal(spot_pipe(method=method, drafter=_drafter(), **kw).sequences, ref), method
        assert spot_pipe.model_calls <= standard_calls


def test_llada2_drop_in_refuses_what_it_cannot_reproduce():
    from spot.rules import NotACommitRule

    _, (spot_pipe,) = _pipelines(8, ("SpotLLaDA2Pipeline",))
    kw = dict(input_ids=torch.tensor([[5, 9, 14]]), gen_length=8, block_length=8, mask_token_id=hf_tiny.MASK_ID)
    with pytest.raises(NotACommitRule, match="editing_threshold=0.5 .the pipeline's default is 0.5. rewrites"):
        spot_pipe(**kw)  # the pipeline's own default edits committed tokens
    with pytest.raises(NotACommitRule, match="pass editing_threshold=None"):
        spot_pipe(editing_threshold=0.2, **kw)
    for bad in (dict(top_p=0.9), dict(top_k=5)):
        with pytest.raises(ValueError, match="refused: top_p / top_k"):
            spot_pipe(editing_threshold=None, **bad, **kw)
