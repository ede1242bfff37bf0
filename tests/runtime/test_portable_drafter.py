"""The portable drafter and the second embedded target (docs/drafter.md, docs/model_card.md): they load, they decode
exactly, the portable drafter runs on a target of another vocabulary, and `spot bench` compares several drafters in
one run. (A token-bucket drafter on another vocabulary is refused: tests/integrations/test_hf.py.)"""

import json

import pytest
import torch

import hf_tiny
import spot
from spot.hf import HFTarget
from spot.loading import SHIPPED_TARGETS
from spot.order_model import SHIPPED_DRAFTERS
from spot.prompts import held_out_prompts

needs_portable = pytest.mark.skipif(not (SHIPPED_DRAFTERS["portable"] / "drafter.safetensors").is_file(),
                                    reason="no portable drafter in this checkout")
needs_target2 = pytest.mark.skipif(not (SHIPPED_TARGETS["target2"] / "target.safetensors").is_file(),
                                   reason="no second embedded target in this checkout")


def exact_in_fewer_passes(target, drafter, block_size, temperature, prompts=2, budget=16):
    texts = held_out_prompts(prompts)
    ids = [target.tokenizer.encode(t) for t in texts] if target.tokenizer else hf_tiny.PROMPTS
    kw = dict(max_new_tokens=block_size, block_size=block_size, temperature=temperature, seed=2, eos_id=None)
    ref = spot.generate(target, ids, "standard", **kw)
    out = spot.generate(target, ids, "spot", drafter=drafter, budget=budget, **kw)
    assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)
    assert out.stats.target_passes < ref.stats.target_passes


@needs_portable
def test_portable_drafter_loads_and_reads_no_token_ids():
    drafter = spot.load_drafter("portable")
    cfg = drafter.model.cfg
    assert cfg.token_buckets == 0 and cfg.vocab_size == 0 and cfg.resampled
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.max_block) == (3, 128, 8, 64)
    assert sum(p.numel() for p in drafter.model.parameters()) == 631_169
    assert spot.load_drafter().model.cfg.vocab_size == 4096  # the default one records its vocabulary


@needs_portable
@pytest.mark.parametrize("dtype,block_size,temperature", [("float32", 32, 0.0), ("float64", 16, 1.0)])
def test_portable_drafter_is_exact_on_the_embedded_target(dtype, block_size, temperature):
    exact_in_fewer_passes(spot.load_target(dtype=dtype), spot.load_drafter("portable"), block_size, temperature)


@needs_portable
def test_portable_drafter_runs_on_another_vocabulary():
    """A 96-token Hugging Face model: the drafter reads only probabilities, so it runs there, exactly."""
    target = HFTarget(hf_tiny.model("qwen3"), "block_causal", mask_id=hf_tiny.MASK_ID)
    exact_in_fewer_passes(target, spot.load_drafter("portable"), 8, 0.0, budget=8)


@needs_target2
def test_second_target_loads_and_decodes_exactly():
    target = spot.load_target("target2", dtype="float64")
    cfg = target.model.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff) == (4, 192, 6, 3, 512)
    assert target.tokenizer is not None and target.vocab_size == 4096  # the embedded tokenizer
    ids = [target.tokenizer.encode(t) for t in held_out_prompts(2)]
    kw = dict(max_new_tokens=16, block_size=16, temperature=1.0, seed=0, eos_id=None)
    ref = spot.generate(target, ids, "standard", **kw)
    assert spot.generate(target, ids, "confidence", **kw).tokens == ref.tokens
    if (SHIPPED_DRAFTERS["portable"] / "drafter.safetensors").is_file():
        exact_in_fewer_passes(spot.load_target("target2"), spot.load_drafter("portable"), 32, 0.0)


@needs_portable
def test_bench_compares_several_drafters_in_one_run(tmp_path):
    from spot.cli import main

    path = tmp_path / "two.json"
    assert main(["bench", "--num-prompts", "1", "--max-new-tokens", "16", "--block-size", "16", "--budget", "4",
                 "--ignore-eos", "--methods", "standard,spot", "--drafter", "default,portable", "--assert-exact",
                 "--quiet", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert list(report["methods"]) == ["standard", "spot[default]", "spot[portable]"]
    assert all(r["exact_match_vs_standard"] for r in report["methods"].values())
    assert report["settings"]["assert_exact"] and report["settings"]["drafter"] == "default,portable"
    # each drafter's own branch: its drafter.json's `tree_branch` (portable: 8; the default target's drafter names
    # none, so spot.tree.BRANCH, 4)
    from spot.tree import BRANCH
    assert report["settings"]["branch"] == {"spot[default]": BRANCH, "spot[portable]": 8}
    with pytest.raises(SystemExit, match="twice"):
        main(["bench", "--num-prompts", "1", "--methods", "spot", "--drafter", "portable,portable"])
    with pytest.raises(SystemExit, match="several drafters"):
        main(["generate", "--max-new-tokens", "4", "--block-size", "4", "--drafter", "default,portable"])


def test_portable_refuses_token_buckets(tmp_path):
    from spot.cli import main

    with pytest.raises(SystemExit, match="--portable"):
        main(["build", "drafter", "--data", str(tmp_path), "--portable", "--token-buckets", "16"])
