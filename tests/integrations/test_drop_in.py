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
def test_llada2_pipeline_drop_in_equals_the_pipeline(prompt_length, block_length, gen_length, eos):
    """T = 0: the pipeline run with one commit per step and the drop-in give the same tokens (through each row's
    first end-of-sequence token when it stops early), the drop-in in fewer model calls."""
    model, (pipe, spot_pipe) = _pipelines(block_length)
    ids = torch.arange(3, 3 + prompt_length)[None].repeat(2, 1)
    ids[1] += 20
    kw = dict(input_ids=ids, gen_length=gen_length, block_length=block_length, mask_token_id=hf_tiny.MASK_ID,
              eos_token_id=eos if eos is not None else hf_tiny.EOS_ID, eos_early_stop=eos is not None,
              output_type="seq", temperature=0.0)
    model.calls = 0
    ref = pipe(num_inference_steps=block_length, threshold=1.0, editing_threshold=None, **kw).sequences.tolist()
    pipeline_calls = model.calls
    for method in ("standard", "confidence", "spot"):
        model.calls = 0
        got = spot_pipe(method=method, drafter=_drafter(), budget=8, **kw).sequences.tolist()
        assert spot_pipe.model_calls == model.calls
        if eos is None:
            assert got == ref, method
        else:
            assert [_through_eos(r, eos) for r in got] == [_through_eos(r, eos) for r in ref], method
        if method != "standard":
            assert model.calls < pipeline_calls, (method, model.calls, pipeline_calls)
        else:
            assert model.calls <= pipeline_calls


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_llada2_drop_in_at_temperature_is_exact_against_coupled_standard(temperature):
    _, (spot_pipe,) = _pipelines(8, ("SpotLLaDA2Pipeline",))
    kw = dict(input_ids=torch.tensor([[5, 9, 14, 20, 33, 40, 41, 42, 43, 44, 45]]), gen_length=16, block_length=8,
              mask_token_id=hf_tiny.MASK_ID, eos_early_stop=False, output_type="seq", temperature=temperature,
              seed=5)
    ref = spot_pipe(method="standard", **kw).sequences
    standard_calls = spot_pipe.model_calls
    for method in ("confidence", "spot"):
        assert torch.equal(spot_pipe(method=method, drafter=_drafter(), **kw).sequences, ref), method
        assert spot_pipe.model_calls <= standard_calls


def test_llada2_drop_in_refuses_what_is_not_one_commit_per_step():
    _, (spot_pipe,) = _pipelines(8, ("SpotLLaDA2Pipeline",))
    ids = torch.tensor([[5, 9, 14]])
    for bad in (dict(threshold=0.7), dict(editing_threshold=0.5), dict(minimal_topk=2), dict(top_p=0.9)):
        with pytest.raises(ValueError, match="refused"):
            spot_pipe(input_ids=ids, gen_length=8, block_length=8, mask_token_id=hf_tiny.MASK_ID, **bad)
