"""Issue #39 ("Trust, round three"), the checkpoint rows: what a checkpoint directory can still do to a load.

- pickle: an index (model.safetensors.index.json) whose weight_map names .bin shards is refused before transformers
  sees the directory (transformers handed them to torch.load); so is a shard outside the directory.
- traceback or a message that names nothing: a config.json transformers rejects, a config.json that is a JSON list,
  a tokenizer.json without `added_tokens`, `--family bd3lm` on a checkpoint of no family: one line naming the
  directory (and the file or field where spot can tell).
- hang: a FIFO in the directory (tokenizer.json) is refused, not waited on.
- wrong: `--family` contradicting config.json (a Dream checkpoint as `llada`) is refused naming both unless
  `--force-family`; the CLI's random prompts never hold the target's mask id (a LLaDA checkpoint without a
  tokenizer failed at some seeds).
"""

import json
import os

import pytest
import torch

pytest.importorskip("transformers")

import families_tiny as ft  # noqa: E402
import hf_tiny  # noqa: E402
from helpers import cli_error_line, within  # noqa: E402
import spot  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from spot.cli import main  # noqa: E402

GENERATE = ["generate", "--max-new-tokens", "4", "--block-size", "4", "--methods", "standard", "--budget", "4",
            "--dtype", "float64"]


def qwen3_dir(path, **config):
    """A generic (no family) checkpoint directory, config.json fields set from `config`."""
    hf_tiny.model("qwen3").save_pretrained(path)
    edited = {**json.loads((path / "config.json").read_text()), **config}
    (path / "config.json").write_text(json.dumps(edited))
    return path


# ---- pickle ----------------------------------------------------------------------------------------------------------

def _index_of(directory, shard: str, keep_safetensors=False):
    state = load_file(directory / "model.safetensors")
    if not keep_safetensors:
        (directory / "model.safetensors").unlink()
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: shard for k in state}}))
    return state


def test_an_index_naming_pickled_shards_is_refused_before_transformers(tmp_path, monkeypatch, capsys):
    directory = qwen3_dir(tmp_path / "ckpt")
    state = _index_of(directory, "pytorch_model-00001-of-00001.bin")
    torch.save(state, directory / "pytorch_model-00001-of-00001.bin")

    def unpickled(*args, **kwargs):
        raise AssertionError("torch.load was called: a pickle was opened")
    monkeypatch.setattr(torch, "load", unpickled)
    with pytest.raises(ValueError, match="weight_map names 'pytorch_model-00001-of-00001.bin', not a .safetensors "
                                         "file; spot loads safetensors only"):
        spot.load_target(str(directory), mask_id=hf_tiny.MASK_ID)
    line = cli_error_line([*GENERATE, "--target", str(directory), "--mask-id", str(hf_tiny.MASK_ID)], capsys)
    assert "model.safetensors.index.json: weight_map names 'pytorch_model-00001-of-00001.bin'" in line


def test_an_index_naming_a_shard_outside_the_directory_or_none_is_refused(tmp_path):
    directory = qwen3_dir(tmp_path / "ckpt")
    _index_of(directory, "../elsewhere.safetensors", keep_safetensors=True)
    (tmp_path / "elsewhere.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="weight_map names '../elsewhere.safetensors', outside"):
        spot.load_target(str(directory), mask_id=hf_tiny.MASK_ID)
    _index_of(directory, "model-00001-of-00002.safetensors", keep_safetensors=True)
    with pytest.raises(FileNotFoundError, match="'model-00001-of-00002.safetensors', which is not a file"):
        spot.load_target(str(directory), mask_id=hf_tiny.MASK_ID)


def test_a_sharded_safetensors_checkpoint_still_loads(tmp_path):
    """The index check lets a real sharded checkpoint through, and it decodes as the single-file one does."""
    hf_tiny.model("qwen3").save_pretrained(tmp_path / "one")
    hf_tiny.model("qwen3").save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    outs = [spot.generate(spot.load_target(str(tmp_path / name), mask_id=hf_tiny.MASK_ID, dtype="float64"),
                          hf_tiny.PROMPTS, "standard", max_new_tokens=4, block_size=4).tokens
            for name in ("one", "sharded")]
    assert outs[0] == outs[1]


# ---- traceback, or a message that names nothing ---------------------------------------------------------------------

@pytest.mark.parametrize("config, says", [
    ({"num_attention_heads": 0}, "config.json: field 'num_attention_heads' must be an integer >= 1, got 0"),
    ({"hidden_size": "32"}, "config.json: field 'hidden_size' must be an integer >= 1, got '32'"),
    ({"rope_scaling": "garbage"}, "transformers cannot build the model from config.json and its weights"),
    ({"layer_types": ["full_attention"]}, "transformers cannot build the model from config.json and its weights"),
])
def test_a_config_transformers_rejects_is_one_line_naming_the_checkpoint(tmp_path, capsys, config, says):
    directory = qwen3_dir(tmp_path / "ckpt", **config)
    line = cli_error_line([*GENERATE, "--target", str(directory), "--mask-id", str(hf_tiny.MASK_ID)], capsys)
    assert f"--target {directory}" in line and says in line, line


@pytest.mark.parametrize("text, says", [("[1, 2]", "config.json: expected a JSON object, got a list"),
                                        ("{", "config.json: not valid JSON")])
def test_a_config_that_is_no_json_object_is_named(tmp_path, capsys, text, says):
    directory = qwen3_dir(tmp_path / "ckpt")
    (directory / "config.json").write_text(text)
    assert says in cli_error_line([*GENERATE, "--target", str(directory), "--mask-id", "95"], capsys)


def test_a_tokenizer_json_without_added_tokens_is_named(tmp_path, capsys):
    """transformers 5 raises KeyError('added_tokens') on it (4.57 loads it: the command then runs)."""
    import transformers

    directory = qwen3_dir(tmp_path / "ckpt")
    hf_tiny.save_tokenizer(directory)
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    del tokenizer["added_tokens"]
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    argv = [*GENERATE, "--target", str(directory), "--mask-id", "95"]
    if int(transformers.__version__.split(".")[0]) < 5:
        assert main(argv) == 0
        return
    line = cli_error_line(argv, capsys)
    assert f"{directory}: transformers cannot load its tokenizer files (KeyError: 'added_tokens')" in line


def test_family_bd3lm_on_a_checkpoint_of_no_family_is_one_line(tmp_path, capsys):
    directory = qwen3_dir(tmp_path / "ckpt")
    line = cli_error_line([*GENERATE, "--target", str(directory), "--mask-id", "95", "--family", "bd3lm",
                     "--trust-remote-code"], capsys)
    assert f"{directory}: transformers cannot build the model" in line and "attn_backend" in line


def test_a_fifo_in_a_checkpoint_is_refused_not_waited_on(tmp_path):
    directory = qwen3_dir(tmp_path / "ckpt")
    os.mkfifo(directory / "tokenizer.json")
    with pytest.raises(ValueError) as refused:
        within(60, lambda: spot.load_target(str(directory), mask_id=hf_tiny.MASK_ID))
    assert str(refused.value) == (f"{directory / 'tokenizer.json'}: is a FIFO; a checkpoint directory holds regular "
                            "files and folders only")


# ---- wrong: the family named is the family loaded; made-up prompts hold no special id -----------------------------

def test_a_family_contradicting_config_json_is_refused_naming_both(tmp_path, capsys):
    directory = ft.save_checkpoint("dream", tmp_path / "dream")
    with pytest.raises(ValueError, match="family: 'llada' contradicts .*config.json, which names the 'dream' family"):
        spot.load_target(str(directory), family="llada", trust_remote_code=True, dtype="float64")
    line = cli_error_line([*GENERATE, "--target", str(directory), "--trust-remote-code", "--family", "llada"], capsys)
    assert "'llada' contradicts" in line and "'dream' family" in line and "--force-family" in line
    sdar = ft.save_checkpoint("sdar", tmp_path / "sdar")
    line = cli_error_line([*GENERATE, "--target", str(sdar), "--trust-remote-code", "--family", "bd3lm",
                     "--mask-id", str(ft.MASK_ID)], capsys)
    assert "'bd3lm' contradicts" in line and "'sdar' family" in line


def test_force_family_loads_the_family_named(tmp_path):
    from spot.families import DreamTarget, LLaDATarget

    directory = ft.save_checkpoint("dream", tmp_path / "dream")
    forced = spot.load_target(str(directory), family="llada", force_family=True, trust_remote_code=True,
                              dtype="float64")
    assert type(forced) is LLaDATarget
    assert type(spot.load_target(str(directory), family="dream", trust_remote_code=True,
                                 dtype="float64")) is DreamTarget
    with pytest.raises(ValueError, match="force_family: forces a family named with family="):
        spot.load_target(str(directory), family="generic", force_family=True, trust_remote_code=True)


def test_cli_random_prompts_never_hold_the_checkpoints_mask_id(tmp_path, capsys):
    """At --seed 15 the old draw from [3, V) put the tiny LLaDA's mask id (63) in a 5-token prompt, which the target
    refuses; the prompts the CLI makes up now leave out every special id of the target."""
    directory = ft.save_checkpoint("llada", tmp_path / "llada")
    assert main([*GENERATE, "--target", str(directory), "--trust-remote-code", "--prompt-len", "5",
                 "--seed", "15"]) == 0
    assert "standard" in capsys.readouterr().out
