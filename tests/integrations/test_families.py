"""spot.families on the stand-ins of tests/families_tiny.py: `standard` equals each family's own one-commit sampler,
and with the family's rule its own sampler at its parallel setting; spot and confidence equal `standard` (with and
without a rule) with drafted commits accepted, `rule="family"` reads each family's default, the family is read from
a checkpoint directory, and the self-check names the cause of a model it refuses. Runs on transformers 4.56-4.57
and 5.x (make test runs it on both)."""

import pytest
import torch

pytest.importorskip("transformers")

import families_tiny as ft  # noqa: E402
import hf_tiny  # noqa: E402
import spot  # noqa: E402
from spot.families import (AlignedBlockSession, BD3LMTarget, BlockAlignedTarget, DreamTarget, LLaDA2Target,  # noqa: E402
                           LLaDATarget, SDARTarget, family_of, family_target)
from spot.decode import resolve_rule  # noqa: E402
from spot.hf import HFTarget, IncompatibleModelError, SelfCheckError  # noqa: E402
from spot.order_model import LearnedDrafter, OrderModel, OrderModelConfig  # noqa: E402

FAMILIES = ("llada", "dream", "sdar", "llada2")
TARGETS = {"llada": LLaDATarget, "dream": DreamTarget, "sdar": SDARTarget, "llada2": LLaDA2Target}


def portable_drafter(seed=0):
    torch.manual_seed(seed)
    return LearnedDrafter(OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, top_k=8,
                                                      resampled=True)))


def target(family, seed=0, attn="sdpa"):
    return family_target(family, ft.model(family, seed, attn), mask_id=ft.MASK_ID, eos_id=ft.EOS_ID)


def own_sampler(family, model, prompt, gen, B):
    if family == "llada":
        return ft.llada_generate(model, prompt, gen, B)
    if family == "dream":
        return ft.dream_generate(model, prompt, gen)
    return ft.block_aligned_generate(model, prompt, gen, B, cached=family == "sdar")


@pytest.mark.parametrize("block_size", [4, 8])
@pytest.mark.parametrize("family", FAMILIES)
def test_standard_equals_the_familys_own_sampler(family, block_size):
    """Prompt lengths 4, 8, 5 and 11: multiples of the block and not (SDAR / LLaDA2 decode the prompt's partial
    last block with the first generated tokens). Dream's sampler decodes the whole generation as one block."""
    t = target(family)
    gen = block_size if family == "dream" else 16
    for prompt in ft.PROMPTS:
        want = own_sampler(family, t.model, prompt, gen, block_size)
        got = spot.generate(t, [prompt], "standard", max_new_tokens=gen, block_size=block_size, eos_id=None)
        assert got.tokens[0] == want, (family, len(prompt))
    batched = spot.generate(t, ft.PROMPTS, "standard", max_new_tokens=gen, block_size=block_size, eos_id=None)
    alone = [spot.generate(t, [p], "standard", max_new_tokens=gen, block_size=block_size, eos_id=None).tokens[0]
             for p in ft.PROMPTS]
    assert batched.tokens == alone  # rows of different lengths (padded, or in separate calls) do not interact


def assert_spot_and_confidence_equal_standard(t, block_size, temperature):
    """spot (the portable drafter) and confidence give standard's tokens in no more passes, with drafted commits
    accepted."""
    s = dict(max_new_tokens=16, block_size=block_size, temperature=temperature, eos_id=None, budget=8)
    ref = spot.generate(t, ft.PROMPTS, "standard", **s)
    drafted = 0
    for method in ("confidence", "spot"):
        out = spot.generate(t, ft.PROMPTS, method, drafter=portable_drafter(), **s)
        assert out.tokens == ref.tokens, method
        assert out.stats.target_passes <= ref.stats.target_passes
        drafted += sum((n - 1) * c for n, c in out.stats.commits_per_pass.items() if n > 1)
    assert drafted > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("block_size", [4, 8])
@pytest.mark.parametrize("family", FAMILIES)
def test_spot_and_confidence_equal_standard(family, block_size, temperature):
    assert_spot_and_confidence_equal_standard(target(family), block_size, temperature)


# ------------------------------------------------------------------------------ the families' parallel samplers

# name: (family, the rule, the family's own sampler at that setting on a stand-in), block 8 and 16 new tokens (Dream:
# the whole generation one block of 16). LLaDA at steps = gen_length / 2 and / 4 (2 and 4 commits per step),
# Fast-dLLM's threshold (>= 0.9, float64) and factor rules, SDAR's and LLaDA2's thresholds (> 0.85 / > 0.95) at
# steps = block_length (SDAR's unclamped quota never exceeds the masked count there) and LLaDA2's with two per step,
# Dream's schedule at steps < max_new_tokens with its maskgit_plus and entropy confidences.
PARALLEL = {
    "llada steps:4": ("llada", "steps:4", lambda m, p: ft.llada_generate(m, p, 16, 8, steps=4)),
    "llada steps:2": ("llada", "steps:2", lambda m, p: ft.llada_generate(m, p, 16, 8, steps=2)),
    "fast-dllm threshold": ("llada", "threshold:0.9,cmp:ge",
                            lambda m, p: ft.fast_dllm_generate(m, p, 16, 8, threshold=0.9)),
    "fast-dllm factor": ("llada", "factor:1.0", lambda m, p: ft.fast_dllm_generate(m, p, 16, 8, factor=1.0)),
    "sdar dynamic": ("sdar", "threshold:0.85,steps:8",
                     lambda m, p: ft.block_aligned_generate(m, p, 16, 8, steps=8, threshold=0.85)),
    "llada2 generate": ("llada2", "threshold:0.95,steps:8",
                        lambda m, p: ft.block_aligned_generate(m, p, 16, 8, steps=8, threshold=0.95,
                                                                 cached=False)),
    "llada2 two per step": ("llada2", "threshold:0.95,steps:4",
                            lambda m, p: ft.block_aligned_generate(m, p, 16, 8, steps=4, threshold=0.95,
                                                                     cached=False)),
    "dream maskgit_plus": ("dream", "dream:8", lambda m, p: ft.dream_schedule_generate(m, p, 16, steps=8)),
    "dream entropy": ("dream", "dream:8,alg:entropy",
                      lambda m, p: ft.dream_schedule_generate(m, p, 16, steps=8, alg="entropy")),
}


def parallel_settings(family):
    return dict(max_new_tokens=16, block_size=16 if family == "dream" else 8, eos_id=None)


@pytest.mark.parametrize("name", PARALLEL)
def test_standard_with_the_rule_equals_the_familys_parallel_sampler(name):
    """`standard` with the family's rule is the family's own sampler at its parallel setting, token for token, one
    pass per forward of it (the stand-in's samplers make one forward per step), and it does commit several
    positions per forward."""
    family, rule, own_parallel = PARALLEL[name]
    t = target(family)
    per_pass = set()
    for prompt in ft.PROMPTS:
        out = spot.generate(t, [prompt], "standard", rule=rule, **parallel_settings(family))
        assert out.tokens[0] == own_parallel(t.model, prompt), (name, len(prompt))
        per_pass |= set(out.stats.commits_per_pass)
    assert max(per_pass) > 1, (name, per_pass)


# four commits per step: neither drafter guesses a whole step of four right on these stand-ins (exactness is checked
# all the same)
NO_SAVING = {"llada steps:2"}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", PARALLEL)
def test_spot_and_confidence_over_the_familys_rule_equal_standard(name, temperature):
    """spot (the portable drafter) and confidence over the family's rule give standard's tokens with it, one prompt
    per call (a lock-step batch waits for its slowest row), in no more passes, and in fewer over the prompts;
    standard's rows do not interact (all prompts in one call give each prompt's own tokens)."""
    family, rule, _ = PARALLEL[name]
    t = target(family)
    s = dict(parallel_settings(family), temperature=temperature, rule=rule, budget=8)
    saved = 0
    refs = []
    for row, prompt in enumerate(ft.PROMPTS):  # each prompt's noise row as in the batch
        ref = spot.generate(t, [prompt], "standard", rows=[row], **s)
        refs += ref.tokens
        for method in ("confidence", "spot"):
            out = spot.generate(t, [prompt], method, drafter=portable_drafter(), rows=[row], **s)
            assert out.tokens == ref.tokens, (method, len(prompt))
            assert out.stats.target_passes <= ref.stats.target_passes
            saved += ref.stats.target_passes - out.stats.target_passes
    assert spot.generate(t, ft.PROMPTS, "standard", **s).tokens == refs
    assert saved > 0 or name in NO_SAVING, name


@pytest.mark.parametrize("family,block_size,want", [
    ("llada", 8, "steps:4"), ("llada", 32, "steps:16"), ("llada", 1, "steps:1"), ("dream", 16, "dream:16,alg:entropy"),
    ("sdar", 4, "threshold:0.85"), ("llada2", 32, "threshold:0.95")])
def test_rule_family_is_the_familys_default(family, block_size, want):
    t = target(family)
    rule, confidence = resolve_rule("family", t, "standard", block_size, "prob")
    assert str(rule) == want and confidence == ("neg_entropy" if family == "dream" else "prob")
    if block_size in (4, 8):
        kw = dict(max_new_tokens=8, block_size=block_size, eos_id=None)
        assert spot.generate(t, ft.PROMPTS, "confidence", rule="family", **kw).tokens == \
            spot.generate(t, ft.PROMPTS, "standard", rule=want, **kw).tokens


def test_rule_family_is_refused_by_name_where_a_family_has_no_commit_rule():
    with pytest.raises(ValueError, match="BD3LMTarget names no sampler default"):
        spot.generate(bd3lm_target(4), [[5, 6]], "standard", max_new_tokens=4, block_size=4, rule="family")
    with pytest.raises(TypeError, match="block_size: expected an int"):
        spot.generate(target("llada"), [[5, 6]], "standard", max_new_tokens=4, block_size=4.0, rule="family")


def test_the_output_starts_after_the_prompt_in_aligned_blocks():
    """SDAR / LLaDA2 open the first block with the prompt's last tokens: the output is what follows the prompt,
    max_new_tokens long, and an end-of-sequence token cuts it as in any target."""
    t = target("sdar")
    prompt = ft.PROMPTS[2]  # 5 tokens, B = 4: one prompt token opens the first block
    out = spot.generate(t, [prompt], "standard", max_new_tokens=7, block_size=4, eos_id=None)
    assert len(out.tokens[0]) == 7
    assert out.tokens[0] == ft.block_aligned_generate(t.model, prompt, 16, 4)[:7]
    with pytest.raises(ValueError, match="end-of-sequence"):  # it would read as the answer's end
        t.start([[5, 6, 7, 8, 9, ft.EOS_ID]], 8, 4)
    session = t.start([prompt, ft.PROMPTS[1]], 8, 4)
    assert isinstance(session, AlignedBlockSession) and session.prompt_head == [1, 0]
    assert session.block_start.tolist() == [4, 8]
    assert session.initial_block(4)[0].tolist() == [prompt[4]] + [ft.MASK_ID] * 3


def test_llada_rows_of_different_lengths_go_in_separate_calls():
    t = target("llada")
    out = spot.generate(t, ft.PROMPTS, "standard", max_new_tokens=8, block_size=4, eos_id=None)
    lengths = {len(p) for p in ft.PROMPTS}
    assert out.stats.target_passes == len(lengths) * 8  # one call per length per commit
    with pytest.raises(IncompatibleModelError, match="llada"):  # the generic path hands it position ids
        HFTarget(t.model, "bidirectional", mask_id=ft.MASK_ID).start([[5, 6]], 4, 4)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_is_read_from_the_checkpoint_directory(family, tmp_path):
    directory = ft.save_checkpoint(family, tmp_path / family)
    mask = {} if family in ("llada", "dream") else dict(mask_id=ft.MASK_ID)  # SDAR's / LLaDA2's configs name none
    t = spot.load_target(str(directory), trust_remote_code=True, dtype="float64", **mask)
    assert type(t) is TARGETS[family] and t.mask_id == ft.MASK_ID and t.eos_id == ft.EOS_ID
    want = spot.generate(target(family), ft.PROMPTS, "standard", max_new_tokens=8, block_size=4, eos_id=None)
    got = spot.generate(t, ft.PROMPTS, "confidence", max_new_tokens=8, block_size=4, eos_id=None)
    assert got.tokens == want.tokens
    generic = spot.load_target(str(directory), trust_remote_code=True, dtype="float64", family="generic",
                               layout="bidirectional", **mask)
    assert type(generic) is HFTarget


def test_cli_generates_with_a_family_checkpoint(tmp_path, capsys):
    from spot.cli import main

    directory = ft.save_checkpoint("sdar", tmp_path / "sdar")
    assert main(["generate", "--target", str(directory), "--trust-remote-code", "--mask-id", str(ft.MASK_ID),
                 "--dtype", "float64", "--attn-implementation", "sdpa", "--prompt-len", "6", "--methods",
                 "standard,confidence", "--max-new-tokens", "8", "--block-size", "4", "--budget", "4"]) == 0
    out = capsys.readouterr().out
    assert "standard" in out and "confidence" in out


def test_cli_generates_with_a_bd3lm_checkpoint(tmp_path, capsys):
    """No --attn-implementation (BD3-LM chooses its own); --block-size its config.block_size (the warm-up too)."""
    from spot.cli import main

    directory = ft.save_checkpoint("bd3lm", tmp_path / "bd3lm", block_size=8)
    assert main(["generate", "--target", str(directory), "--trust-remote-code", "--mask-id", str(ft.MASK_ID),
                 "--dtype", "float64", "--prompt-len", "6", "--methods", "standard,confidence", "--max-new-tokens",
                 "16", "--block-size", "8", "--budget", "4"]) == 0
    out = capsys.readouterr().out
    assert "standard" in out and "confidence" in out


def test_family_of_reads_model_type_architectures_and_auto_map():
    assert family_of({"model_type": "llada"}) == "llada"
    assert family_of({"model_type": "llada2_moe"}) == "llada2"
    assert family_of({"architectures": ["SDARForCausalLM"]}) == "sdar"
    assert family_of({"auto_map": {"AutoModel": "modeling_dream.DreamModel"}}) == "dream"
    assert family_of({"model_type": "bd3lm"}) == "bd3lm"
    assert family_of({"model_type": "qwen3"}) is None
    assert family_of(ft.model("llada2").config) == "llada2"
    with pytest.raises(ValueError, match="family"):
        family_target("gpt", ft.model("sdar"), mask_id=ft.MASK_ID)


def bd3lm_target(block_size, seed=0):
    return family_target("bd3lm", ft.model("bd3lm", seed, block_size=block_size), mask_id=ft.MASK_ID,
                         eos_id=ft.EOS_ID)


def test_bd3lm_loads_from_a_directory_with_auto_map(tmp_path):
    """config.json's auto_map names AutoModelForMaskedLM (as BD3-LM's checkpoints do); the family is read from it."""
    ft.save_checkpoint("bd3lm", tmp_path, block_size=4)
    t = spot.load_target(str(tmp_path), trust_remote_code=True, mask_id=ft.MASK_ID, dtype=torch.float64)
    assert isinstance(t, BD3LMTarget) and t.block_size == 4
    prompt = ft.PROMPTS[2]
    out = spot.generate(t, [prompt], "standard", max_new_tokens=8, block_size=4, eos_id=None)
    assert out.tokens[0] == ft.bd3lm_generate(t.model, prompt, 8)
    with pytest.raises(ValueError, match="attn_implementation"):
        spot.load_target(str(tmp_path), trust_remote_code=True, mask_id=ft.MASK_ID, attn_implementation="sdpa")


@pytest.mark.parametrize("block_size", [4, 8])
def test_bd3lm_standard_equals_its_forward_driven_decode(block_size):
    """Prompt lengths 4, 8, 5, 11 and 0: multiples of the block and not (the prompt's partial last block is decoded
    with the first generated tokens, blocks at absolute positions)."""
    t = bd3lm_target(block_size)
    for prompt in ft.PROMPTS + [[]]:
        want = ft.bd3lm_generate(t.model, prompt, 16)
        got = spot.generate(t, [prompt], "standard", max_new_tokens=16, block_size=block_size, eos_id=None)
        assert got.tokens[0] == want, len(prompt)
    batched = spot.generate(t, ft.PROMPTS, "standard", max_new_tokens=16, block_size=block_size, eos_id=None)
    assert batched.tokens == [ft.bd3lm_generate(t.model, p, 16) for p in ft.PROMPTS]  # one call per length


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("block_size", [4, 8])
def test_bd3lm_spot_and_confidence_equal_standard(block_size, temperature):
    assert_spot_and_confidence_equal_standard(bd3lm_target(block_size), block_size, temperature)


def test_bd3lm_pass_equals_its_cache_protocol():
    """A pass without the model's cache gives the logits of its cached protocol (whole blocks stored with
    store_kv=True, the last block scored over the cache), the mask token's logit aside."""
    t = bd3lm_target(4)
    seq = torch.tensor([[5, 9, 14, 20, 7, 8, 10, 11, 3, ft.MASK_ID, 60, ft.MASK_ID]])
    mine = t.forward(seq)[:, -4:]
    t.model.reset_kv_cache()
    with torch.no_grad():
        for k in range(2):
            t.model(input_ids=seq[:, 4 * k:4 * k + 4], timesteps=torch.zeros(1), sample_mode=True, store_kv=True)
        theirs = t.model(input_ids=seq[:, 8:], timesteps=torch.zeros(1), sample_mode=True).logits
    keep = torch.arange(ft.VOCAB) != ft.MASK_ID
    torch.testing.assert_close(mine[..., keep], theirs[..., keep], rtol=1e-10, atol=1e-10)
    assert bool((mine[..., ft.MASK_ID] < theirs[..., ft.MASK_ID] - 1e5).all())
    with pytest.raises(ValueError, match="KV cache"):  # the cache is still set
        t.forward(seq)


def test_bd3lm_refusals():
    t = bd3lm_target(4)
    with pytest.raises(ValueError, match="block_size"):
        spot.generate(t, [[5, 6]], "standard", max_new_tokens=8, block_size=8)
    with pytest.raises(ValueError, match="model_length"):
        spot.generate(t, [[5, 6]], "standard", max_new_tokens=64, block_size=4)
    m = ft.model("bd3lm")
    m.config.time_conditioning = True
    with pytest.raises(ValueError, match="time_conditioning"):
        family_target("bd3lm", m, mask_id=ft.MASK_ID)
    with pytest.raises(ValueError, match="float32"):
        family_target("bd3lm", ft.BD3LM(ft.BD3LMConfig()).double(), mask_id=ft.MASK_ID)
    with pytest.raises(ValueError, match="holds the mask id"):
        spot.generate(t, [[5, ft.MASK_ID]], "standard", max_new_tokens=4, block_size=4)
    with pytest.raises(ValueError, match="must differ"):
        family_target("bd3lm", ft.model("bd3lm"), mask_id=ft.MASK_ID, eos_id=ft.MASK_ID)
    with pytest.raises(ValueError, match="mask_id"):
        family_target("bd3lm", ft.model("bd3lm"), mask_id=10**6)
    # the generic path dies inside the model's config or forward: a named error that points at the family
    g = HFTarget(ft.model("bd3lm"), "block_causal", mask_id=ft.MASK_ID, self_check=False)
    with pytest.raises(IncompatibleModelError, match="bd3lm"):
        spot.generate(g, [[5, 6]], "standard", max_new_tokens=4, block_size=4)


# ---------------------------------------------------------------------------------------------- the self-check


class NaNLogits(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, **kwargs):
        out = self.inner(input_ids=input_ids, **kwargs)
        out.logits[..., 3] = float("nan")
        return out


class IgnoresPositionIds(torch.nn.Module):
    """Computes its own positions (0.. over the call's columns after the cache), as Fast-dLLM's Dream does."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def refused_cause(t) -> str:
    with pytest.raises(SelfCheckError) as info:
        t.self_check(4)
    return info.value.cause


@pytest.mark.parametrize("layout", ["block_causal", "bidirectional"])
def test_nan_logits_are_refused(layout):
    t = HFTarget(NaNLogits(hf_tiny.model("qwen3")), layout, mask_id=hf_tiny.MASK_ID)
    assert refused_cause(t) == "non-finite logits"
    with pytest.raises(SelfCheckError, match="NaN"):
        t.self_check(4)


@pytest.mark.parametrize("layout", ["block_causal", "bidirectional"])
def test_a_model_that_ignores_the_mask_is_refused_as_such(layout):
    t = HFTarget(hf_tiny.IgnoresMask(hf_tiny.model("qwen3")), layout, mask_id=hf_tiny.MASK_ID)
    assert refused_cause(t) == "mask ignored"


def test_a_model_that_ignores_position_ids_is_refused_as_such():
    t = HFTarget(IgnoresPositionIds(hf_tiny.model("qwen3")), "block_causal", mask_id=hf_tiny.MASK_ID)
    assert refused_cause(t) == "position ids ignored"


def test_a_model_that_misreads_the_mask_form_is_refused_as_such():
    """LLaDA2 under eager reads a 4D mask as 1.0 = attend (bool or float), not as an additive 0 / -inf one."""
    llada2 = ft.model("llada2", attn="eager")
    t = HFTarget(llada2, "block_causal", mask_id=ft.MASK_ID)
    assert t.mask_form == "additive" and refused_cause(t) == "mask form misread (additive vs bool)"
    with pytest.raises(SelfCheckError, match="reads the 4D mask as float, the target handed it additive"):
        t.self_check(4)
    # the family targets hand each the form it reads
    LLaDA2Target(llada2, mask_id=ft.MASK_ID).self_check(4)
    assert LLaDA2Target(llada2, mask_id=ft.MASK_ID).mask_form == "float"
    SDARTarget(ft.model("sdar", attn="eager"), mask_id=ft.MASK_ID).self_check(4)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_targets_pass_their_self_check(family):
    t = target(family)
    t.self_check(4)
    t.self_check(8)
    assert isinstance(t, BlockAlignedTarget) == (family in ("sdar", "llada2"))


def test_llada2_eager_decodes_like_sdpa():
    want = spot.generate(target("llada2"), ft.PROMPTS, "standard", max_new_tokens=8, block_size=4, eos_id=None)
    got = spot.generate(target("llada2", attn="eager"), ft.PROMPTS, "spot", drafter=portable_drafter(),
                        max_new_tokens=8, block_size=4, eos_id=None, budget=8)
    assert got.tokens == want.tokens
