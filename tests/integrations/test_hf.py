"""spot.HFTarget: SPOT on transformers models (docs/integrations.md). Exactness against `standard` on tiny random
Qwen3 and Llama models in both layouts, the mask self-check, cache hygiene, and loading a checkpoint directory."""

import warnings

import pytest
import torch

pytest.importorskip("transformers")

import helpers  # noqa: E402
import hf_tiny  # noqa: E402
import spot  # noqa: E402
import spot.target  # noqa: E402
from spot.hf import HFTarget, SelfCheckError, load_hf_target  # noqa: E402
from spot.order_model import LearnedDrafter, OrderModel, OrderModelConfig  # noqa: E402

ARCHS = ("qwen3", "llama")
LAYOUTS = ("block_causal", "bidirectional")


def portable_drafter(seed=0):
    """An order drafter that reads no token ids (no token buckets), so it runs on any vocabulary."""
    torch.manual_seed(seed)
    cfg = OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, top_k=8, resampled=True)
    return LearnedDrafter(OrderModel(cfg))


def target(arch="qwen3", layout="block_causal", attn="sdpa", **kwargs):
    return HFTarget(hf_tiny.model(arch, attn), layout, mask_id=hf_tiny.MASK_ID, **kwargs)


def drafted_commits(out) -> int:
    """Commits accepted beyond the root's one, over every pass and row."""
    return sum((n - 1) * count for n, count in out.stats.commits_per_pass.items() if n > 1)


# 2 archs x 2 layouts x 2 attention implementations x 3 temperatures x 3 block sizes = 72 cases; each checks
# spot and confidence on 3 prompts of different lengths at 2 seeds: 288 method x seed comparisons.
@pytest.mark.parametrize("block_size", [4, 16, 32])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_exact_against_standard(arch, layout, attn, temperature, block_size):
    t = target(arch, layout, attn)
    drafter = portable_drafter()
    settings = dict(max_new_tokens=max(2 * block_size, 8) if block_size == 4 else block_size, block_size=block_size,
                    temperature=temperature, budget=8, eos_id=None)
    accepted = {"spot": 0, "confidence": 0}
    for seed in (0, 1):
        ref = spot.generate(t, hf_tiny.PROMPTS, "standard", seed=seed, **settings)
        for method in accepted:
            out = spot.generate(t, hf_tiny.PROMPTS, method, seed=seed, drafter=drafter, **settings)
            assert out.tokens == ref.tokens, (method, seed)
            assert out.stats.target_passes <= ref.stats.target_passes
            accepted[method] += drafted_commits(out)
    assert accepted["confidence"] > 0 and accepted["spot"] > 0, accepted


@pytest.mark.parametrize("layout", LAYOUTS)
def test_nodes_scored_together_equal_apart(layout):
    t = target("qwen3", layout, self_check=False)
    B = 8
    nodes = torch.full((3, 4, B), hf_tiny.MASK_ID, dtype=torch.long)
    for i in range(4):
        nodes[:, i, : 2 * i] = torch.arange(3, 3 + 2 * i)
    together = t.start(hf_tiny.PROMPTS, B, B).score(nodes)
    # The float64 model computes its RoPE and RMSNorm in float32 (t.compute_dtype), whose rounding may follow the
    # call's shapes: nodes agree to float32 rounding, not float64's. Measured: equal here at every SIMD level, and
    # up to 0.8 float32 ulp of the logit scale for eager attention (its float32 softmax); 8 ulps leave 10x room,
    # four decades below the order-one change of a node that sees another.
    assert t.compute_dtype == torch.float32
    tol = 8 * torch.finfo(t.compute_dtype).eps * (1 + together.abs().max().item())
    for i in range(4):
        apart = t.start(hf_tiny.PROMPTS, B, B).score(nodes[:, i:i + 1])
        torch.testing.assert_close(together[:, i:i + 1], apart, rtol=0, atol=tol)


def test_block_causal_cache_keeps_only_the_prefix():
    t = target("llama", "block_causal", self_check=False)
    session = t.start(hf_tiny.PROMPTS, 16, 8)
    width = max(map(len, hf_tiny.PROMPTS))
    nodes = torch.full((3, 5, 8), hf_tiny.MASK_ID, dtype=torch.long)
    session.score(nodes)
    assert session.cache.get_seq_length() == width  # the prompt, none of the 5 x 8 node tokens
    assert session.block_start.tolist() == [len(p) for p in hf_tiny.PROMPTS]
    session.append(torch.full((3, 8), 7, dtype=torch.long))
    session.score(nodes[:, :2])
    assert session.cache.get_seq_length() == width + 8
    assert session.block_start.tolist() == [len(p) + 8 for p in hf_tiny.PROMPTS]
    assert session.passes == 2


def test_generate_backend_reaches_the_block_causal_pass(monkeypatch):
    """generate(backend=...) is the backend of a block-causal session's tree ops (tree_mask, tree_position_ids), not
    only of the round's; "cpu", which has no tree-op kernels, covers them with the reference, as on the embedded
    target; the tokens are the same, and an unknown backend is refused when the session starts."""
    helpers.assert_backend_reaches_tree_ops(monkeypatch, target("llama", "block_causal", self_check=False),
                                            hf_tiny.PROMPTS, {"tree_mask", "tree_position_ids"},
                                            max_new_tokens=8, block_size=4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_model_that_ignores_the_mask_is_refused(layout):
    t = HFTarget(hf_tiny.IgnoresMask(hf_tiny.model("qwen3")), layout, mask_id=hf_tiny.MASK_ID)
    with pytest.raises(ValueError, match="self-check"):
        spot.generate(t, hf_tiny.PROMPTS, "standard", max_new_tokens=8, block_size=4)


def test_the_self_check_tolerance_follows_the_precision_the_model_computes_in():
    """A float64 transformers model computes its RoPE, RMSNorm and eager softmax in float32 (HFTarget.compute_dtype),
    so its self-check allows float32 rounding; a model computing in float64 throughout is held to float64's. The
    same change with the call's shape, 1e-6 of the logit scale (float32 rounding's order), passes the first and is
    refused in the second as batch-dependent numerics; a model that ignores its mask is refused in both."""
    def bidirectional(model):
        return HFTarget(model, "bidirectional", mask_id=hf_tiny.MASK_ID)

    pure, float64_eager = hf_tiny.Float64LM(), hf_tiny.model("llama", "eager")
    assert bidirectional(pure).compute_dtype == torch.float64
    assert bidirectional(float64_eager).compute_dtype == torch.float32
    assert bidirectional(hf_tiny.model("llama", "sdpa")).compute_dtype == torch.float32  # RoPE, RMSNorm
    assert bidirectional(hf_tiny.model("llama", "sdpa", dtype=torch.bfloat16)).compute_dtype == torch.bfloat16
    bidirectional(pure).self_check(4)
    bidirectional(hf_tiny.BatchJitter(float64_eager, 1e-6)).self_check(4)
    with pytest.raises(SelfCheckError, match="change by") as refused:
        bidirectional(hf_tiny.BatchJitter(pure, 1e-6)).self_check(4)
    assert refused.value.cause == "batch-dependent numerics"
    for model in (pure, float64_eager):
        with pytest.raises(SelfCheckError) as refused:
            bidirectional(hf_tiny.IgnoresMask(model)).self_check(4)
        assert refused.value.cause == "mask ignored", model


def test_decoding_a_float64_transformers_model_warns_of_its_float32_compute(monkeypatch):
    """Float64 logits computed partly in float32 may move by float32 ulps with the other nodes of a pass: the decoder
    warns that decoding is exact only up to near-ties, as for float32 logits; a model computing in float64 throughout
    is not warned about."""
    def warned(model):
        monkeypatch.setattr(spot.target, "_warned", set())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spot.generate(HFTarget(model, "bidirectional", mask_id=hf_tiny.MASK_ID), hf_tiny.PROMPTS[:1],
                          "confidence", max_new_tokens=4, block_size=4, eos_id=None)
        return [str(w.message) for w in caught if "batch_invariant" in str(w.message)]

    assert any("computes in torch.float32" in m for m in warned(hf_tiny.model("llama", "eager")))
    assert warned(hf_tiny.Float64LM()) == []


def test_the_self_check_passes_a_model_that_applies_it():
    t = target("llama", "bidirectional")
    t.self_check(4)  # no error
    out = spot.generate(t, hf_tiny.PROMPTS[:1], "standard", max_new_tokens=4, block_size=4)
    assert len(out.tokens[0]) == 4


def test_mask_forms_follow_the_attention_implementation():
    visible = torch.tensor([[[[True, False]]]])
    assert target(attn="sdpa").mask(visible).dtype == torch.bool
    additive = target(attn="eager").mask(visible)
    assert additive.dtype == torch.float64 and additive[0, 0, 0, 0] == 0 and additive[0, 0, 0, 1] == -float("inf")


def test_arguments_are_checked():
    m = hf_tiny.model("qwen3")
    with pytest.raises(ValueError, match="layout"):
        HFTarget(m, "causal", mask_id=hf_tiny.MASK_ID)
    with pytest.raises(ValueError, match="mask_id"):
        HFTarget(m, mask_id=hf_tiny.VOCAB)
    with pytest.raises(ValueError, match="logits_shift"):
        HFTarget(m, "block_causal", mask_id=hf_tiny.MASK_ID, logits_shift=1)
    flash = type("Flash", (torch.nn.Module,), {})()
    flash.config = hf_tiny.config("qwen3", "flash_attention_2")
    with pytest.raises(ValueError, match="flash_attention_2"):
        HFTarget(flash, mask_id=1)


def test_logits_shift_reads_the_previous_position():
    t0, t1 = target("qwen3", "bidirectional", self_check=False), target("qwen3", "bidirectional", logits_shift=1,
                                                                      self_check=False)
    nodes = torch.full((3, 1, 4), hf_tiny.MASK_ID, dtype=torch.long)
    s0, s1 = t0.start(hf_tiny.PROMPTS, 8, 4), t1.start(hf_tiny.PROMPTS, 8, 4)
    plain, shifted = s0.score(nodes), s1.score(nodes)
    torch.testing.assert_close(shifted[:, :, 1:], plain[:, :, :-1], rtol=0, atol=0)
    with pytest.raises(ValueError, match="at least one token"):
        t1.start([[]], 4, 4)


def test_a_token_bucket_drafter_of_another_vocabulary_is_refused():
    drafter = spot.load_drafter()  # reads token ids of the embedded target's 4096-token vocabulary
    with pytest.raises(ValueError, match="vocabulary"):
        spot.generate(target(), hf_tiny.PROMPTS, "spot", drafter=drafter, max_new_tokens=4, block_size=4)


# ------------------------------------------------------------------------------------------------ checkpoints

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qwen3-tiny")
    hf_tiny.model("qwen3").save_pretrained(directory)
    hf_tiny.save_tokenizer(directory)
    return directory


def test_load_target_reads_a_checkpoint_directory(checkpoint):
    t = spot.load_target(str(checkpoint), dtype="float64", layout="bidirectional", mask_token="<mask>")
    assert isinstance(t, HFTarget) and t.layout == "bidirectional"
    assert (t.mask_id, t.eos_id, t.vocab_size) == (hf_tiny.MASK_ID, hf_tiny.EOS_ID, hf_tiny.VOCAB)
    prompt = t.tokenizer.encode("w5 w9 w14")
    assert prompt == [5, 9, 14]
    got = spot.generate(t, [prompt], "confidence", max_new_tokens=8, block_size=4, eos_id=None)
    want = spot.generate(target("qwen3", "bidirectional"), [prompt], "standard", max_new_tokens=8, block_size=4,
                         eos_id=None)
    assert got.tokens == want.tokens


def test_checkpoint_errors_are_clear(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="mask token"):
        load_hf_target(checkpoint)  # neither tokenizer nor config names one
    with pytest.raises(ValueError, match="not in the tokenizer"):
        load_hf_target(checkpoint, mask_token="<nothing>")
    (tmp_path / "config.json").write_text((checkpoint / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="no weights"):
        spot.load_target(str(tmp_path), mask_id=1)
    with pytest.raises(TypeError, match="Hugging Face"):
        spot.load_target("random", layout="bidirectional")


def test_cli_generates_with_a_checkpoint(checkpoint, capsys):
    from spot.cli import main

    assert main(["generate", "--target", str(checkpoint), "--dtype", "float64", "--mask-token", "<mask>",
                 "--prompt", "w5 w9 w14", "--methods", "standard,confidence", "--max-new-tokens", "8",
                 "--block-size", "4", "--budget", "4"]) == 0
    out = capsys.readouterr().out
    assert "standard" in out and "confidence" in out
    with pytest.raises(SystemExit, match="mask token"):
        main(["generate", "--target", str(checkpoint), "--prompt", "w5", "--max-new-tokens", "4",
              "--block-size", "4", "--methods", "standard"])


def test_collect_and_train_a_drafter_for_a_checkpoint(checkpoint, tmp_path):
    """`spot build collect` + `spot build drafter` on a Hugging Face checkpoint: the two commands write their files
    (ids of a vocabulary past 32768 tokens would be int32) and the trained drafter decodes the target exactly."""
    from safetensors import safe_open
    from spot.cli import main

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"w{3 + i} w{10 + 2 * i} w{40 + i}\n" for i in range(8)))
    traj, drafter_dir = tmp_path / "traj", tmp_path / "drafter"
    assert main(["build", "collect", "--target", str(checkpoint), "--mask-token", "<mask>", "--dtype", "float64",
                 "--layout", "bidirectional", "--prompts-file", str(prompts), "--num-prompts", "8",
                 "--block-sizes", "4", "--temperatures", "0,1", "--max-new-tokens", "8", "--batch-size", "4",
                 "--out", str(traj), "--quiet"]) == 0
    with safe_open(str(traj / "traj-B4-T0.safetensors"), "pt") as f:
        assert f.get_tensor("order").shape == (8 * 2, 4) and f.get_tensor("topk_ids").dtype == torch.int16
    assert main(["build", "drafter", "--data", str(traj), "--out", str(drafter_dir), "--steps", "30",
                 "--batch-size", "32", "--eval-every", "30", "--heldout-every", "4", "--resampled", "--quiet"]) == 0
    drafter = spot.load_drafter(str(drafter_dir))
    assert drafter.model.cfg.token_buckets == 0  # reads no token ids: runs on this vocabulary
    t = spot.load_target(str(checkpoint), dtype="float64", layout="bidirectional", mask_token="<mask>")
    for temperature in (0.0, 1.0):
        ref = spot.generate(t, hf_tiny.PROMPTS, "standard", max_new_tokens=8, block_size=4, eos_id=None,
                            temperature=temperature)
        out = spot.generate(t, hf_tiny.PROMPTS, "spot", drafter=drafter, max_new_tokens=8, block_size=4,
                            eos_id=None, temperature=temperature, budget=8)
        assert out.tokens == ref.tokens and out.stats.target_passes < ref.stats.target_passes


def test_collect_stores_wide_vocabularies_as_int32(tmp_path):
    from safetensors import safe_open
    from spot.lab.pipeline.collect import collect

    t = HFTarget(hf_tiny.wide_model(), "block_causal", mask_id=40000, self_check=False)
    (path,) = collect(t, [[5, 6, 7]], tmp_path, block_sizes=(4,), temperatures=(0.0,), max_new_tokens=4,
                      batch_size=1, progress=False)
    with safe_open(str(path), "pt") as f:
        ids = f.get_tensor("topk_ids")
        assert ids.dtype == torch.int32 and int(ids.max()) >= 2**15  # ids past int16 survive
