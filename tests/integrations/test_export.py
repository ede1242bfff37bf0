"""`spot export DIR`: an embedded target with SDAR's attention written as an SDAR checkpoint, loaded back through
transformers with a stand-in of SDAR's own modeling files (tests/sdar_standin/, which re-derives what SDAR's code does;
docs/integrations.md records the run against SDAR's real files), decodes the embedded target's tokens."""

import json
import shutil
from pathlib import Path

import pytest
import torch

import spot
import spot.loading
from spot.export import SDAR_CODE_FILES, export_sdar
from spot.model import ModelConfig

transformers = pytest.importorskip("transformers")

STANDIN = Path(__file__).resolve().parent.parent / "sdar_standin.py"
SMALL = dict(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)


def block_target(prefix_attention="block", dtype="float64"):
    """A random target on the shipped tokenizer, its weights scaled so that predictions are peaked."""
    target = spot.load_target("random", config=ModelConfig(prefix_attention=prefix_attention, **SMALL), seed=1,
                              dtype=dtype)
    with torch.no_grad():
        for p in target.model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(p.numel()))
    return target


def exported(target, directory):
    path = export_sdar(target.model, target.tokenizer, directory)
    for name in SDAR_CODE_FILES:  # what a user places beside the weights: SDAR's two files (here, the stand-in)
        shutil.copy(STANDIN, path / name)
    return path


def test_the_checkpoint_is_sdars_format(tmp_path):
    path = export_sdar(block_target().model, block_target().tokenizer, tmp_path / "ckpt")
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "sdar" and config["architectures"] == ["SDARForCausalLM"]
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_sdar.SDARForCausalLM"
    assert config["tie_word_embeddings"] and config["head_dim"] == 8 and config["num_key_value_heads"] == 2
    tok = json.loads((path / "tokenizer_config.json").read_text())
    assert tok["mask_token"] == "<|mask|>" and tok["eos_token"] == "<|eos|>"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                      "special_tokens_map.json", "tokenizer.json",
                                                      "tokenizer_config.json"]


@pytest.mark.parametrize("rule", ["one", "threshold:0.85", "steps:2"])
def test_the_sdar_family_target_decodes_the_embedded_targets_tokens(tmp_path, rule):
    from spot.families import SDARTarget

    embedded = block_target()
    family = spot.load_target(str(exported(embedded, tmp_path / "ckpt")), trust_remote_code=True, dtype="float64")
    assert isinstance(family, SDARTarget) and family.mask_id == embedded.mask_id == 2
    tok = embedded.tokenizer
    prompts = [tok.encode("def add(a, b):\n"), tok.encode("Question: A farm has 19 geese."), tok.encode("x")]
    kw = dict(max_new_tokens=12, block_size=4, rule=rule, eos_id=None)
    mine = spot.generate(embedded, prompts, "standard", **kw)
    theirs = spot.generate(family, prompts, "standard", **kw)
    assert theirs.tokens == mine.tokens
    assert spot.generate(family, prompts, "confidence", budget=8, **kw).tokens == mine.tokens
    # the pass logits agree to the precision SDAR's code computes its norms and rotations in (float32)
    a = embedded.start(prompts[:1], 8, 4).score(torch.full((1, 1, 4), 2))
    b = family.start(prompts[:1], 8, 4).score(torch.full((1, 1, 4), 2))
    torch.testing.assert_close(a.to(b.dtype), b, rtol=1e-4, atol=1e-4)


def test_bad_destinations_are_refused_by_name_and_nothing_is_overwritten(tmp_path, monkeypatch):
    target = block_target()
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        export_sdar(target.model, target.tokenizer, full)
    assert [p.name for p in full.iterdir()] == ["keep.txt"] and (full / "keep.txt").read_text() == "mine"
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    with pytest.raises(FileExistsError, match="is a file"):
        export_sdar(target.model, target.tokenizer, a_file)
    with pytest.raises(PermissionError, match="cannot write"):  # under a file: no directory can be made there
        export_sdar(target.model, target.tokenizer, a_file / "ckpt")
    with pytest.raises(PermissionError, match="cannot write"):  # /proc takes no new directory, even from root
        export_sdar(target.model, target.tokenizer, "/proc/spot-export-test")
    monkeypatch.setattr("os.access", lambda *a, **k: False)  # a directory this user may not write in
    with pytest.raises(PermissionError, match="may write in"):
        export_sdar(target.model, target.tokenizer, tmp_path / "new")
    monkeypatch.undo()
    assert a_file.read_text() == "mine" and not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "full"]  # no staging directory left behind
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (export_sdar(target.model, target.tokenizer, empty) / "config.json").is_file()  # an empty one is taken


def test_a_token_causal_target_is_not_exported(tmp_path):
    target = block_target(prefix_attention="causal")
    with pytest.raises(ValueError, match="token-causal"):
        export_sdar(target.model, target.tokenizer, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


def test_the_command_writes_and_refuses_in_one_line(tmp_path, capsys):
    from spot.cli import main
    from spot.loading import save_model

    source = tmp_path / "target"
    save_model(block_target(dtype="float32").model, source)
    assert main(["export", str(tmp_path / "ckpt"), "--target", str(source)]) == 0
    assert "model_type sdar" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="not empty"):
        main(["export", str(tmp_path / "ckpt"), "--target", str(source)])


def test_the_command_exports_the_default_target_and_refuses_the_token_causal_ones(tmp_path, capsys):
    from spot.cli import main

    assert main(["export", str(tmp_path / "ckpt")]) == 0
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"]) == (256, 5)
    for name in ("causal", "target2"):
        with pytest.raises(SystemExit, match="token-causal"):
            main(["export", str(tmp_path / "other"), "--target", name])
    assert not (tmp_path / "other").exists()
