"""Issue #39 ("Trust, round three"): a scripted sweep of bad inputs across the command line and the API.

Every case is a bad path, file, number, report, checkpoint or tensor that issue 39's rules cover (the output-path
rule, the input-file rule, safetensors-only weights, sizes before allocation, the family named, one error path).
A command-line case must end in exactly one line on stderr, `spot: error: ...`, a non-zero status and no
traceback; an API case must raise a named error (ValueError, TypeError, FileNotFoundError) whose message is one
line. Each case runs in this process and is refused before any work (nothing is decoded, trained or allocated at
size). No case touches a real device node: FIFOs and symlinks stand in (tests/runtime/test_bad_paths.py makes
device nodes with mknod where permitted). tests/runtime/test_cli_errors.py holds the sweep of bad flag values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import spot
import spot.cli
import spot.decode
import spot.lab.bench
import spot.lab.project
import spot.prompts
import spot.rules
import spot.tokenizer
import spot_kernels
import torch
from spot import files
from spot.cli import main

PACKAGE = Path(spot.__file__).resolve().parent
BENCH = ["bench", "--target", "random", "--num-prompts", "1", "--max-new-tokens", "4", "--block-size", "4",
         "--methods", "standard", "--budget", "4", "--quiet"]
GENERATE = ["generate", "--target", "random", "--max-new-tokens", "4", "--block-size", "4", "--methods",
            "standard", "--budget", "4"]


# ---- the paths every case is built from (made inside the test's own folder) -----------------------------------------

def _fifo(tmp):
    path = tmp / "fifo"
    if not path.exists():
        os.mkfifo(path)
    return path


def _link_to_fifo(tmp):
    link = tmp / "link"
    link.symlink_to(_fifo(tmp))
    return link


def _folder(tmp):
    path = tmp / "folder"
    path.mkdir(exist_ok=True)
    return path


def _write(tmp, name, data):
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _sparse(tmp, size=files.INPUT_LIMIT_MB * 10**6 + 1):
    path = tmp / "huge"
    with open(path, "wb") as f:
        f.truncate(size)
    return path


BAD_OUTPUTS = {  # a file written at the path: refused for each
    "fifo": _fifo, "symlink-to-fifo": _link_to_fifo, "folder": _folder,
    "missing-folder": lambda tmp: tmp / "missing" / "out.json", "in-package": lambda tmp: PACKAGE / "out.json",
}
BAD_INPUTS = {  # a file read whole: refused for each
    "fifo": _fifo, "symlink-to-fifo": _link_to_fifo, "folder": _folder, "missing": lambda tmp: tmp / "missing",
    "over-the-cap": _sparse, "not-utf8": lambda tmp: _write(tmp, "bad", b"\xff\xfe\x00"),
}
BAD_JSON = {  # a report or config that is no JSON object
    "list": "[1, 2]", "nan": "NaN", "string": '"report"', "number": "16", "null": "null", "truncated": '{"a": ',
    "empty": "", "nested": "[" * 100_000 + "]" * 100_000,
}

CASES: list[tuple[str, object]] = []  # (id, build(tmp) -> ("cli", argv) or ("api", call))


def cli(case_id, build):
    CASES.append((case_id, lambda tmp: ("cli", build(tmp))))


def api(case_id, build):
    CASES.append((case_id, lambda tmp: ("api", build(tmp))))


# ---- 1. output paths: every writer, every bad kind ------------------------------------------------------------------

def _report_file(tmp):
    return _write(tmp, "report.json", json.dumps(
        {"settings": {"num_prompts": 1, "max_new_tokens": 8, "block_size": 4, "budget": 4},
         "methods": {"spot": {"commits_per_pass": {"2": 4}}}}))


WRITERS = {
    "bench --json": lambda tmp, out: [*BENCH, "--json", str(out)],
    "project --json": lambda tmp, out: ["project", str(_report_file(tmp)), "--json", str(out)],
    "project --plot": lambda tmp, out: ["project", str(_report_file(tmp)), "--plot", str(out)],
    "build tokenizer --out": lambda tmp, out: ["build", "tokenizer", "--out", str(out)],
    "build prompts --out": lambda tmp, out: ["build", "prompts", "--out", str(out)],
    "build tune --out": lambda tmp, out: ["build", "tune", "--out", str(out)],
}
for writer, argv_of in WRITERS.items():
    for kind, make in BAD_OUTPUTS.items():
        if kind == "missing-folder" and writer.startswith("build"):
            continue  # the pipeline's steps create their output's folder
        cli(f"{writer} {kind}", lambda tmp, argv_of=argv_of, make=make: argv_of(tmp, make(tmp)))
for step, flag in (("corpus", "--out"), ("target", "--out"), ("target", "--export"), ("collect", "--out"),
                   ("drafter", "--out")):
    for kind in ("fifo", "symlink-to-fifo", "regular-file"):  # a folder is written there
        make = BAD_OUTPUTS.get(kind) or (lambda tmp: _write(tmp, "file", "x"))
        cli(f"build {step} {flag} {kind}", lambda tmp, step=step, flag=flag, make=make:
            ["build", step, flag, str(make(tmp))])
for kind in ("fifo", "symlink-to-fifo", "regular-file"):
    make = BAD_OUTPUTS.get(kind) or (lambda tmp: _write(tmp, "file", "x"))
    cli(f"bench --plot {kind}", lambda tmp, make=make: [*BENCH, "--plot", str(make(tmp))])
cli("bench --plot a FIFO where a figure goes", lambda tmp: [*BENCH, "--plot", str(_plot_folder_with_fifo(tmp))])


def _plot_folder_with_fifo(tmp):
    folder = tmp / "plots"
    folder.mkdir()
    os.mkfifo(folder / "pass_reduction.png")
    return folder


for kind, make in BAD_OUTPUTS.items():  # the API's writers
    if kind != "in-package":
        api(f"atomic_write_text {kind}", lambda tmp, make=make: lambda: files.atomic_write_text(make(tmp), "{}"))
        api(f"check_writable {kind}", lambda tmp, make=make: lambda: files.check_writable(make(tmp)))
api("atomic_write_text in-package", lambda tmp: lambda: files.atomic_write_text(PACKAGE / "x.json", "{}"))
api("save_weights into a FIFO", lambda tmp: lambda: spot.loading.save_weights(torch.nn.Linear(1, 1), _fifo(tmp), "w",
                                                                              {}))


# ---- 2. input files: every reader, every bad kind ------------------------------------------------------------------

for kind, make in BAD_INPUTS.items():
    cli(f"bench --prompts-file {kind}", lambda tmp, make=make: [*BENCH, "--prompts-file", str(make(tmp))])
    cli(f"build collect --prompts-file {kind}", lambda tmp, make=make:
        ["build", "collect", "--target", "random", "--prompts-file", str(make(tmp)), "--out", str(tmp / "o")])
    cli(f"project {kind}", lambda tmp, make=make: ["project", str(make(tmp))])
    cli(f"project --measured {kind}", lambda tmp, make=make:
        ["project", str(_report_file(tmp)), "--measured", str(make(tmp))])
    api(f"read_json {kind}", lambda tmp, make=make: lambda: files.read_json(make(tmp)))
    api(f"load_tokenizer {kind}", lambda tmp, make=make: lambda: spot.tokenizer.load_tokenizer(make(tmp)))
for name, text in BAD_JSON.items():
    cli(f"project report {name}", lambda tmp, text=text: ["project", str(_write(tmp, "r.json", text))])
    api(f"load_drafter config {name}", lambda tmp, text=text: lambda: spot.load_drafter(str(_drafter(tmp, text))))
cli("bench --prompts-file blank", lambda tmp: [*BENCH, "--prompts-file", str(_write(tmp, "p.txt", "\n \n"))])


def _drafter(tmp, config_text):
    from spot.order_model import OrderModel, OrderModelConfig, save_order_model

    save_order_model(OrderModel(OrderModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_block=8)), tmp)
    (tmp / "drafter.json").write_text(config_text)
    return tmp


# ---- 2. what a report holds: every field the projection reads, bad types and ranges ------------------------------

def _report(tmp, settings=None, spot_entry=None, top=None):
    s = {"num_prompts": 2, "max_new_tokens": 64, "block_size": 32, "budget": 4, **(settings or {})}
    data = {"settings": s, "methods": {"standard": {"commits_per_pass": {"1": 128}},
                                       "spot": {"commits_per_pass": {"1": 4, "2": 30}, **(spot_entry or {})}},
            **(top or {})}
    return _write(tmp, "r.json", json.dumps(data))


BAD_NUMBERS = {"negative": -16, "zero": 0, "string": "32", "float": 32.5, "nan": float("nan"), "null": None,
               "bool": True, "list": [32]}
for field in ("block_size", "num_prompts", "max_new_tokens", "budget"):
    for name, value in BAD_NUMBERS.items():
        if field == "budget" and name == "zero":
            continue  # the same as negative for budget (>= 1): one case each is enough
        cli(f"project settings.{field} {name}", lambda tmp, field=field, value=value:
            ["project", str(_report(tmp, {field: value}))])
for name, histogram in {"negative count": {"2": -30}, "negative key": {"-1": 4}, "string count": {"2": "30"},
                        "word key": {"two": 30}, "list": [1, 2], "empty": {}, "no commits": {"0": 5}}.items():
    cli(f"project commits_per_pass {name}", lambda tmp, histogram=histogram:
        ["project", str(_report(tmp, spot_entry={"commits_per_pass": histogram}))])
for name, value in {"negative": -1.29, "inf": float("inf"), "string": "5", "null": None}.items():
    cli(f"project dispatch ops {name}", lambda tmp, value=value:
        ["project", str(_report(tmp, spot_entry={"dispatch_per_pass": {"decoder": {"ops": value}}}))])
for name, top in {"methods list": {"methods": [1]}, "settings list": {"settings": [1]},
                  "by_budget key": {"by_budget": {"four": {}}}, "by_budget list": {"by_budget": [1]}}.items():
    cli(f"project report {name}", lambda tmp, top=top: ["project", str(_report(tmp, top=top))])
for name, curve in {"runs not a list": {"runs": {"a": 1}}, "standard_passes negative": {"standard_passes": -1},
                    "budget string": {"runs": [{"method": "confidence", "budget": "8", "target_passes": 4}]},
                    "passes zero": {"runs": [{"method": "confidence", "budget": 8, "target_passes": 0}]},
                    "method missing": {"runs": [{"budget": 8, "target_passes": 4}]}}.items():
    data = {"settings": {"num_prompts": 2, "max_new_tokens": 64, "block_size": 32}, "standard_passes": 128,
            "runs": [{"method": "confidence", "budget": 8, "target_passes": 64}], **curve}
    cli(f"project budget curve {name}", lambda tmp, data=data: ["project", str(_write(tmp, "c.json",
                                                                                     json.dumps(data)))])
for name, points in {"negative ms": [{"nodes": 1, "pass_ms": -1.0}], "zero nodes": [{"nodes": 0, "pass_ms": 1.0}],
                     "string ms": [{"nodes": 1, "pass_ms": "1"}], "not a list": {"nodes": 1}}.items():
    curve = {"pass_curve": {"shape": "embedded", "block": 4, "prefix": 0, "batch": 1, "layers_measured": 1,
                            "points": points}}
    cli(f"project --measured {name}", lambda tmp, curve=curve:
        ["project", str(_report_file(tmp)), "--measured", str(_write(tmp, "m.json", json.dumps(curve)))])


# ---- 4. sizes before allocation: CLI numbers and op inputs ----------------------------------------------------------

for command in (GENERATE, BENCH):
    for length in ("100000000", str(10**12), "-5"):
        cli(f"{command[0]} --prompt-len {length}", lambda tmp, command=command, length=length:
            [*command, "--prompt-len", length])
cli("bench --num-prompts 10**9", lambda tmp: [*BENCH, "--num-prompts", str(10**9), "--prompt-len", "16"])
cli("generate --max-new-tokens 10**12", lambda tmp: [*GENERATE, "--max-new-tokens", str(10**12)])

Z = torch.zeros((), dtype=torch.long)
for log2 in (34, 36, 38, 40):
    lead = 2 ** (log2 - 14)
    api(f"score broadcast 2**{log2}", lambda tmp, lead=lead: lambda: spot_kernels.score(
        torch.zeros(()).expand(lead, 2**10, 16), torch.ones((), dtype=torch.bool).expand(lead, 2**10), 0,
        Z.expand(lead), Z.expand(lead), Z.expand(lead), 1.0))
    b = 2 ** (log2 - 17)
    api(f"verify_tree broadcast 2**{log2}", lambda tmp, b=b: lambda: spot_kernels.verify_tree(
        torch.full((), -1).expand(b, 2**17), *[Z.expand(b, 2**17)] * 4, Z.expand(b, 4)))
    api(f"noise_uniform broadcast 2**{log2}", lambda tmp, log2=log2: lambda: spot_kernels.noise_uniform(
        0, Z.expand(2**log2), Z, Z, Z))
    api(f"noise_uniform outer 2**{log2}", lambda tmp, log2=log2: lambda: spot_kernels.noise_uniform(
        0, torch.zeros(2 ** (log2 // 2), 1, dtype=torch.long), torch.zeros(1, 2 ** (log2 - log2 // 2),
                                                                          dtype=torch.long), Z, Z))
for name, args in {"negative length": (64, 1, -1, 0), "negative count": (64, -1, 4, 0), "float length": (64, 1, 4.0, 0),
                   "huge": (64, 10**6, 10**6, 0), "all special": (2, 1, 4, 0)}.items():
    api(f"random_prompts {name}", lambda tmp, args=args: lambda: spot.prompts.random_prompts(*args, exclude={0, 1}))


# ---- 3, 5, 6. checkpoints: the weights named, the config read, the family named ----------------------------------

def _checkpoint(tmp, **config):
    hf_tiny = pytest.importorskip("hf_tiny")
    directory = tmp / "ckpt"
    hf_tiny.model("qwen3").save_pretrained(directory)
    edited = {**json.loads((directory / "config.json").read_text()), **config}
    (directory / "config.json").write_text(json.dumps(edited))
    return directory


def _with(directory, name, text):
    (directory / name).write_text(text)
    return directory


def _transformers_major() -> int:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return int(version("transformers").split(".")[0])
    except PackageNotFoundError:
        return 0


CHECKPOINT = ["--mask-id", "95", "--dtype", "float64"]
for name, value in {"zero heads": {"num_attention_heads": 0}, "string hidden": {"hidden_size": "32"},
                    "negative vocab": {"vocab_size": -1}, "float layers": {"num_hidden_layers": 2.5},
                    "rope garbage": {"rope_scaling": "garbage"}, "layer types": {"layer_types": ["x"]},
                    "kv heads zero": {"num_key_value_heads": 0}}.items():
    cli(f"checkpoint config {name}", lambda tmp, value=value: [*GENERATE, "--target", str(_checkpoint(tmp, **value)),
                                                               *CHECKPOINT])
for name, text in BAD_JSON.items():
    cli(f"checkpoint config.json {name}", lambda tmp, text=text:
        [*GENERATE, "--target", str(_with(_checkpoint(tmp), "config.json", text)), *CHECKPOINT])
for name, weight_map in {"bin shard": {"w": "pytorch_model.bin"}, "outside": {"w": "../x.safetensors"},
                         "missing shard": {"w": "model-2.safetensors"}, "empty": {}, "list": ["model.safetensors"],
                         "absolute": {"w": "/etc/x.safetensors"}}.items():
    cli(f"checkpoint index {name}", lambda tmp, weight_map=weight_map:
        [*GENERATE, "--target", str(_with(_checkpoint(tmp), "model.safetensors.index.json",
                                          json.dumps({"weight_map": weight_map}))), *CHECKPOINT])
cli("checkpoint tokenizer.json a FIFO", lambda tmp: [*GENERATE, "--target", str(_fifo_in(_checkpoint(tmp))),
                                                     *CHECKPOINT])
if _transformers_major() >= 5:  # 4.57 loads a tokenizer.json without added_tokens
    cli("checkpoint tokenizer.json without added_tokens", lambda tmp: [*GENERATE, "--target",
                                                                        str(_tokenizer_without_added(_checkpoint(tmp))),
                                                                        *CHECKPOINT])
cli("checkpoint --family bd3lm on no family", lambda tmp: [*GENERATE, "--target", str(_checkpoint(tmp)), *CHECKPOINT,
                                                           "--family", "bd3lm", "--trust-remote-code"])
cli("checkpoint --force-family on the generic path", lambda tmp: [*GENERATE, "--target", str(_checkpoint(tmp)),
                                                                  *CHECKPOINT, "--family", "generic",
                                                                  "--force-family"])
cli("--force-family on the embedded target", lambda tmp: [*GENERATE, "--force-family"])
for declared, named in (("dream", "llada"), ("llada", "dream"), ("sdar", "llada2"), ("llada2", "sdar"),
                        ("sdar", "bd3lm")):
    cli(f"family {named} on a {declared} checkpoint", lambda tmp, declared=declared, named=named:
        [*GENERATE, "--target", str(_family_checkpoint(tmp, declared)), "--trust-remote-code", "--family", named,
         "--mask-id", "63"])
    api(f"load_target family={named} on a {declared} checkpoint", lambda tmp, declared=declared, named=named:
        lambda: spot.load_target(str(_family_checkpoint(tmp, declared)), family=named, trust_remote_code=True))


def _fifo_in(directory):
    os.mkfifo(directory / "tokenizer.json")
    return directory


def _tokenizer_without_added(directory):
    pytest.importorskip("hf_tiny").save_tokenizer(directory)
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    del tokenizer["added_tokens"]
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    return directory


def _family_checkpoint(tmp, family):
    return pytest.importorskip("families_tiny").save_checkpoint(family, tmp / family)


# ---- 7. commit rules wherever they enter (issue 46): strings, CommitRule fields, the SGLang plug-in's config ------

BAD_RULES = ["", "steps:", "threshold:0.9,steps:", "dream:", "dream:8,alg:", "dream:8,eps:", "threshold:", "factor:",
             "threshold:0.9,cmp:", "steps:0", "steps:-2", "steps:3.5", "steps:two", "threshold:1.5", "threshold:nan",
             "factor:-1", "factor:inf", "dream:8,eps:0", "dream:8,alg:origin", "one:3", "one,steps:4",
             "steps:4,cmp:ge", "sometimes", "threshold:0.7,editing_threshold:0.5", "steps:4,steps:8", ","]
for text in BAD_RULES:
    api(f"parse_rule {text!r}", lambda tmp, text=text: lambda: spot.rules.parse_rule(text))
    cli(f"generate --rule {text!r}", lambda tmp, text=text: [*GENERATE, "--rule", text])
    cli(f"bench --rules {text!r}", lambda tmp, text=text: [*BENCH, "--rules", f"one;{text}" if text else ";"])
    api(f"Spot config rule {text!r}", lambda tmp, text=text: lambda: _spot_driver({"rule": text}))
for flag in ("--rule", "--rules"):  # a rule whose steps exceed the block (4)
    cli(f"{flag} steps:5 at B 4", lambda tmp, flag=flag: [*(BENCH if flag == "--rules" else GENERATE), flag, "steps:5"])
BAD_FIELDS = {"steps 0": dict(kind="steps", steps=0), "steps -2": dict(kind="steps", steps=-2),
              "steps 3.5": dict(kind="steps", steps=3.5), "steps bool": dict(kind="steps", steps=True),
              "unknown kind": dict(kind="sometimes"), "kind not a string": dict(kind=3),
              "dream without steps": dict(kind="dream"), "steps without steps": dict(kind="steps"),
              "threshold 1.5": dict(kind="threshold", threshold=1.5), "threshold None": dict(kind="threshold"),
              "threshold nan": dict(kind="threshold", threshold=float("nan")),
              "threshold string": dict(kind="threshold", threshold="0.9"),
              "factor -1.0": dict(kind="factor", threshold=-1.0), "factor 0": dict(kind="factor", threshold=0.0),
              "factor not inclusive": dict(kind="factor", threshold=1.0, inclusive=False),
              "dream eps 0": dict(kind="dream", steps=4, eps=0), "dream eps 1": dict(kind="dream", steps=4, eps=1.0),
              "eps on steps": dict(kind="steps", steps=4, eps=0.5), "one with steps": dict(kind="one", steps=4),
              "steps with a threshold": dict(kind="steps", steps=4, threshold=0.5),
              "cmp on steps": dict(kind="steps", steps=4, inclusive=True), "inclusive string": dict(inclusive="yes"),
              "confidence on one": dict(confidence="margin"),
              "dream confidence unknown": dict(kind="dream", steps=4, confidence="loudness")}
for name, fields in BAD_FIELDS.items():
    api(f"CommitRule {name}", lambda tmp, fields=fields: lambda: spot.rules.CommitRule(**fields))
BAD_SGLANG = {"not a mapping (str)": "abc", "not a mapping (list)": [1, 2], "not a mapping (int)": 5,
              "unknown key": {"budgett": 4}, "budget 0": {"budget": 0}, "width bool": {"width": True},
              "branch 10**6": {"branch": 10**6}, "top_k 70000": {"top_k": 70000}, "top_k 2**40": {"top_k": 2**40},
              "top_k 0": {"top_k": 0}, "seed -1": {"seed": -1}, "temperature nan": {"temperature": float("nan")},
              "confidence unknown": {"confidence": "loudness"}, "backend unknown": {"backend": "nope"},
              "rule not a string": {"rule": 4}, "rule steps:16 at B 8": {"rule": "steps:16"},
              "rule dream:16 at B 8": {"rule": "dream:16"},
              "rule threshold:0.9,steps:9 at B 8": {"rule": "threshold:0.9,steps:9"},
              "rule and confidence contradict": {"rule": "dream:4,alg:entropy", "confidence": "margin"},
              "probes without a rule": {"probes": 1}, "probes >= budget": {"rule": "steps:4", "probes": 16},
              "drafter missing": {"drafter": "/nonexistent/drafter"}, "drafter empty": {"drafter": ""},
              "max_tree_tokens 0": {"max_tree_tokens": 0}}
for name, config in BAD_SGLANG.items():
    api(f"Spot config {name}", lambda tmp, config=config: lambda: _spot_driver(config))
api("Spot config drafter folder without a drafter", lambda tmp: lambda: _spot_driver({"drafter": str(tmp)}))


def _spot_driver(config, block_size=8):
    """The SGLang plug-in built as `Spot.__init__` builds it (block size 8), without SGLang: a refusal starts with
    `Spot: `."""
    from spot.sglang.driver import SpotDriver

    class Driver(SpotDriver):
        def __init__(self):
            self.block_size, self.mask_id, self.fdfo = block_size, 0, True
            self.init_spot(config)

    try:
        Driver()
    except ValueError as err:
        assert str(err).startswith("Spot: "), err
        raise


# ---- the sweep -----------------------------------------------------------------------------------------------------

def test_the_sweep_holds_at_least_150_bad_inputs():
    assert len(CASES) >= 150, len(CASES)
    assert len({case_id for case_id, _ in CASES}) == len(CASES)  # each case named once


@pytest.fixture
def no_work(monkeypatch):
    """Decoding, training or projecting fails the case: everything here is refused before any work."""
    def worked(*args, **kwargs):
        raise AssertionError("the command went to work on a bad input")
    monkeypatch.setattr(spot.lab.bench, "run_bench", worked)
    monkeypatch.setattr(spot.lab.project, "project", worked)
    monkeypatch.setattr(spot.decode, "generate", worked)
    monkeypatch.setattr(spot.cli, "generate", worked)
    monkeypatch.setattr(spot.lab.bench, "generate", worked)


@pytest.mark.parametrize("case_id, build", CASES, ids=[case_id for case_id, _ in CASES])
def test_a_bad_input_ends_in_one_line(case_id, build, tmp_path, capsys, monkeypatch, no_work):
    monkeypatch.chdir(tmp_path)  # the pipeline's .cache/ defaults land here
    monkeypatch.delenv("SPOT_DEBUG", raising=False)
    monkeypatch.delenv("SPOT_MEMORY_LIMIT_GB", raising=False)
    (tmp_path / "case").mkdir()
    kind, what = build(tmp_path / "case")
    capsys.readouterr()  # what building the case printed (transformers' save bar) is not the command's
    if kind == "cli":
        with pytest.raises(SystemExit) as done:
            main(what)
        code = done.value.code
        err = (code + "\n" if isinstance(code, str) else "") + capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code not in (0, None), err
        assert len(lines) == 1 and lines[0].startswith("spot: error: "), err
        assert "Traceback" not in err and "AssertionError" not in err, err
    else:
        with pytest.raises((ValueError, TypeError, FileNotFoundError)) as raised:
            what()
        message = str(raised.value)
        assert message and "\n" not in message, message
