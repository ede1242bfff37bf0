"""SPOT beside its peers on one SDAR checkpoint: the same target, held-out prompts and machine, in one process.

    OMP_NUM_THREADS=1 SPOT_FAMILY_ROOT=DIR FREEDAVE_ROOT=FD PYTHONPATH=TF4:DIR/py \\
        python bench/peers_sdar.py [--target default] [--num-prompts 64] [--max-new-tokens 256] [--block-size 32] \\
        [--json peers.json]

(TF4: transformers 4.57.1, which SDAR's modeling code needs; DIR/src/sdar/ holds SDAR's configuration_sdar.py,
modeling_sdar.py and generate.py, DIR/py the opencompass/models/sdar_utils.py the modeling file imports, as for
bench/families/sdar_export.py; FD is a checkout of github.com/cychomatica/FreeDave. The project holds none of their
code: it is read from those folders.)

Every method decodes every prompt alone (one prompt per call), greedy (T 0), no end-of-sequence stop, for each rule
of `--thresholds` plus `one`:
  1. spot on the embedded target (`--target`, in `--dtype`): `standard`, `spot` (`--drafter`, default the portable
     one) and `oracle`, budget `--budget`;
  2. SDAR's own `block_diffusion_generate` (JetAstra/SDAR generate.py) in `low_confidence_dynamic` mode at each
     threshold, denoising_steps = B, on the target exported with `spot export` and loaded by SDAR's modeling code;
     its draw `sample_with_temperature_topk_topp` is replaced by its T -> 0 limit (as sdar_export.py does);
  3. FreeDave's real code (generation/core.py) on that same model: its baseline `block_decode_with_block_attention`
     (one token per step, or its confidence-threshold decoding) and `block_decode_with_block_attention_FreeDave` in
     `tree_attention` draft mode, greedy, at every `--draft-steps` x `--eager` setting. Its best setting is the one
     with the fewest forwards among those that reproduce its baseline on every prompt (its setting of fewest forwards
     is reported too); each is set against spot's forwards on the prompts where both give `standard`'s tokens.

Counting, the same for every method, per prompt: every call of the model's forward (the embedded model's for spot,
SDARForCausalLM's for the peers), split into prefill (keys of the prompt's whole blocks stored before any decoding
forward), decode (every denoising, drafting or verification forward) and store (a forward that only stores a finished
block's keys, `store_kv=True`); spot's session fuses prefill and stores into its next pass, so its forwards are all
decode. Tokens fed per forward: the query tokens of all forwards over their number (a tree pass over 16 nodes of B
positions feeds 16 B). Tokens per forward: generated tokens over forwards.

Exactness: each method's tokens against spot's `standard` under the matching rule (FreeDave's and SDAR's threshold
decoding compare `c >= T` / `c > T`: FreeDave's is matched by `threshold:T,cmp:ge`, SDAR's by `threshold:T`), and
FreeDave's against its own baseline. The peers read the model with the mask token's logit at -inf, as spot's decoders
read every target (a committed mask token would undo a commit, spot/round.py), so their confidences are spot's:
FreeDave's greedy draw is an argmax over the whole vocabulary, and a mask token drawn there stays masked (its draft
loop can then stop advancing).

A peer that cannot run here is reported with the reason (a missing folder or file, an import that fails, the
export refusing the target) and the rest still runs. The JSON records each method's forwards per prompt and in
total, the peers' repositories, commits and file hashes, the stand-ins installed for imports, and the command.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.machinery
import importlib.util
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

import spot
from spot.lab.bench import check_writable, write_json
from spot.prompts import held_out_prompts

REPO = Path(__file__).resolve().parents[1]
FREEDAVE_REPOSITORY = "github.com/cychomatica/FreeDave"
SDAR_FILES = ("configuration_sdar.py", "modeling_sdar.py", "generate.py")
FREEDAVE_FILES = ("generation/core.py", "generation/attn_utils.py", "generation/sampling_utils.py",
                  "generation/cache_utils.py", "generation/monitor_utils.py")


# --- provenance -----------------------------------------------------------------------------------------------------

def git_commit(root) -> dict:
    """Commit and dirtiness of a git checkout at `root` (None where it is no checkout)."""
    def git(*args):
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    return {"commit": commit, "dirty": bool(git("status", "--porcelain")) if commit else None}


def file_hashes(root: Path, names) -> dict:
    return {n: hashlib.sha256((root / n).read_bytes()).hexdigest() for n in names if (root / n).is_file()}


# --- counting -------------------------------------------------------------------------------------------------------

class Forwards:
    """Forward calls of one decode: prefill / decode / store counts and the query tokens they fed."""

    def __init__(self):
        self.prefill = self.decode = self.store = self.fed = 0

    @property
    def total(self) -> int:
        return self.prefill + self.decode + self.store

    def add(self, tokens: int, store_kv: bool) -> None:
        self.fed += tokens
        if store_kv and self.decode == 0 and self.store == 0:
            self.prefill += 1  # keys of the prompt's whole blocks, before any decoding forward
        elif store_kv:
            self.store += 1
        else:
            self.decode += 1


class PeerModel(torch.nn.Module):
    """SDARForCausalLM as the peers call it, its forwards counted into `self.count` (a Forwards) and the mask token's
    logit at -inf in what it returns. Other attributes (device, config, ...) are the model's."""

    def __init__(self, m, mask_id: int):
        super().__init__()
        self.m, self.mask_id, self.count = m, mask_id, Forwards()

    def forward(self, *a, **k):
        ids = a[0] if a else k["input_ids"]
        self.count.add(ids.numel(), bool(k.get("store_kv")))
        out = self.m(*a, **k)
        out.logits[..., self.mask_id] = float("-inf")
        return out

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.m, name)


def run_row(name: str, outputs: list, counts: list, seconds: float, references: dict) -> dict:
    """One method's row: forwards per prompt and in total, tokens, and exact counts against each reference."""
    forwards = [c.total for c in counts]
    tokens = sum(len(o) for o in outputs)
    total = sum(forwards)
    row = {"method": name, "forwards": total, "forwards_per_prompt": forwards,
           "prefill": sum(c.prefill for c in counts), "decode": sum(c.decode for c in counts),
           "store": sum(c.store for c in counts), "tokens": tokens,
           "tokens_per_forward": tokens / total if total else math.nan,
           "fed_per_forward": sum(c.fed for c in counts) / total if total else math.nan,
           "seconds": seconds, "prompts": len(outputs)}
    for ref_name, ref in references.items():
        same = [a == b for a, b in zip(outputs, ref)]
        row[f"exact_vs_{ref_name}"] = sum(same)
        row[f"same_as_{ref_name}_per_prompt"] = same
    return row


def forwards_ratio(peer: dict, ours: dict) -> dict:
    """The peer's forwards over spot's on the prompts where both give `standard`'s tokens."""
    both = [i for i, (x, y) in enumerate(zip(peer["same_as_standard_per_prompt"], ours["same_as_standard_per_prompt"]))
            if x and y]
    theirs, mine = (sum(r["forwards_per_prompt"][i] for i in both) for r in (peer, ours))
    return {"method": peer["method"], "prompts": len(both), "forwards": theirs, "spot_forwards": mine,
            "ratio": theirs / mine if mine else math.nan, "reproduces_its_baseline": peer["exact_vs_baseline"]}


# --- spot -----------------------------------------------------------------------------------------------------------

def run_spot(target, prompts, method: str, rule: str, settings: dict, drafter=None, orders=None):
    """`method` on each prompt alone: outputs, Forwards per prompt (passes as the session counts them; the query
    tokens from the model's forward), orders per prompt, seconds."""
    seen = []
    hook = target.model.register_forward_pre_hook(lambda module, args: seen.append(args[0].numel()))
    outputs, counts, all_orders, t0 = [], [], [], time.perf_counter()
    try:
        for i, p in enumerate(prompts):
            seen.clear()
            extra = {"drafter": drafter} if method == "spot" else {}
            if method == "oracle":
                extra = {"orders": orders[i]}
            out = spot.generate(target, [p], method, rule=rule, rows=[i], **extra, **settings)
            c = Forwards()
            c.decode, c.fed = out.stats.target_passes, sum(seen)
            if len(seen) != out.stats.target_passes:  # a replayed graph skips the hook: fed tokens unknown
                c.fed = math.nan
            outputs.append(out.tokens[0])
            counts.append(c)
            all_orders.append(out.orders)
    finally:
        hook.remove()
    return outputs, counts, all_orders, time.perf_counter() - t0


# --- the peers' code ------------------------------------------------------------------------------------------------

def load_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stand_in(name: str) -> str:
    """Put a stand-in for the import `name` in sys.modules (the peers' files are never edited); returns what it is.
    Installed only when an import of their files fails on it (`with_stand_ins`):
    - deprecated: FreeDave's core.py decorates an unused helper with `deprecated(...)`; a decorator that returns the
      function.
    - flash_attn: a modeling file that imports it unguarded (SDAR's CPU path never calls it); functions that raise if
      ever called.
    - LossKwargs: an SDAR modeling file written for an older transformers imports transformers.utils.LossKwargs,
      which 4.57 no longer has; an empty TypedDict."""
    if name == "deprecated":
        module = types.ModuleType("deprecated")
        module.deprecated = lambda *a, **k: (a[0] if len(a) == 1 and callable(a[0]) and not k else (lambda f: f))
        sys.modules["deprecated"] = module
        return "deprecated: `deprecated(...)` returns the function it decorates"
    if name == "flash_attn":
        def absent(*a, **k):
            raise RuntimeError("flash_attn stand-in (bench/peers_sdar.py): flash_attn is not installed")
        for mod in ("flash_attn", "flash_attn.ops", "flash_attn.ops.triton", "flash_attn.ops.triton.layer_norm",
                    "flash_attn.bert_padding", "flash_attn.layers", "flash_attn.layers.rotary"):
            module = sys.modules.setdefault(mod, types.ModuleType(mod))
            module.__spec__ = importlib.machinery.ModuleSpec(mod, None)
            for fn in ("flash_attn_func", "flash_attn_varlen_func", "rms_norm_fn", "index_first_axis", "pad_input",
                       "unpad_input", "apply_rotary_emb"):
                setattr(module, fn, absent)
        return "flash_attn: modules whose functions raise if called"
    from typing import TypedDict
    import transformers.utils
    transformers.utils.LossKwargs = TypedDict("LossKwargs", {}, total=False)
    return "LossKwargs: transformers.utils.LossKwargs, an empty TypedDict"


def with_stand_ins(load, installed: list[str]):
    """load(), with a stand-in (`stand_in`) installed for each import it fails on that has one, then retried."""
    while True:
        try:
            return load()
        except ImportError as e:
            # transformers' check of a remote modeling file's imports names the package in its message only
            name = next((n for n in ("deprecated", "flash_attn", "LossKwargs")
                         if n in f"{getattr(e, 'name', None)} {e}"), None)
            if name is None or any(s.split(":")[0] == name for s in installed):
                raise
            installed.append(stand_in(name))


def greedy_in_own_dtype(logits, *args, **kwargs):
    """The T -> 0 limit of SDAR's draw: the argmax of the softmax in the logits' own dtype, and its probability."""
    p, tok = F.softmax(logits, dim=-1).max(-1)
    return tok, p


def export_checkpoint(embedded, sdar_src: Path, directory: Path, dtype, device, stand_ins: list[str]):
    """The embedded target exported (`spot export`) with SDAR's modeling files beside it, loaded by them through
    transformers (stand-ins for imports it lacks appended to `stand_ins`)."""
    from spot.export import SDAR_CODE_FILES, export_sdar

    path = export_sdar(embedded.model, embedded.tokenizer, directory)
    for name in SDAR_CODE_FILES:
        shutil.copy(sdar_src / name, path / name)
    from transformers import AutoModelForCausalLM
    model = with_stand_ins(lambda: AutoModelForCausalLM.from_pretrained(str(path), trust_remote_code=True,
                                                                        dtype=dtype), stand_ins)
    return model.to(device).eval()


def sdar_dynamic(generate_module, model: PeerModel, prompt, gen, B, threshold):
    model.count = Forwards()
    out = generate_module.block_diffusion_generate(
        model, {"input_ids": torch.tensor([prompt], device=model.device)}, model.mask_id, gen_length=gen,
        block_length=B, denoising_steps=B, temperature=1.0, remasking_strategy="low_confidence_dynamic",
        confidence_threshold=threshold)
    return out[0, len(prompt):len(prompt) + gen].tolist(), model.count


def freedave_decode(generation, model: PeerModel, prompt, gen, B, threshold, setting):
    """FreeDave's baseline (setting None) or FreeDave at setting (draft_steps, eager) on one prompt."""
    model.count = Forwards()
    kw = dict(model=model, input_ids=torch.tensor([prompt], device=model.device), attention_mask=None,
              temperature=0.0, alg_temp=0.0, block_length=B, max_gen_length=gen, decoding_steps=gen,
              use_cache=True, mask_token_id=model.mask_id, eos_token_id=model.config.eos_token_id,
              pad_token_id=model.config.pad_token_id, confidence_threshold=threshold, early_exit=False)
    if setting is None:
        out = generation.block_decode_with_block_attention(**kw)
    else:
        draft_steps, eager = setting
        out = generation.block_decode_with_block_attention_FreeDave(
            **kw, draft_steps=draft_steps, eager_acceptance_mode=eager, draft_mode="tree_attention")
    return out.sequences[0, len(prompt):len(prompt) + gen].tolist(), model.count


def peer_runs(fn, prompts, *args):
    outputs, counts, t0 = [], [], time.perf_counter()
    for p in prompts:
        o, c = fn(p, *args)
        outputs.append(o)
        counts.append(c)
    return outputs, counts, time.perf_counter() - t0


# --- report ---------------------------------------------------------------------------------------------------------

def format_rows(rows: list[dict], prompts: int) -> str:
    head = (f"{'method':<34} {'forwards':>8} {'prefill':>7} {'decode':>7} {'store':>6} {'tok/fwd':>7} "
            f"{'fed/fwd':>8} {'exact':>11}")
    lines = [head]
    for r in rows:
        exact = ", ".join(f"{k[9:]} {v}/{prompts}" for k, v in r.items() if k.startswith("exact_vs_"))
        lines.append(f"{r['method']:<34} {r['forwards']:>8} {r['prefill']:>7} {r['decode']:>7} {r['store']:>6} "
                     f"{r['tokens_per_forward']:>7.2f} {r['fed_per_forward']:>8.1f}  {exact}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="default",
                    help="'default' (embedded), or a directory with target.safetensors (SDAR attention)")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--budget", type=int, default=16, help="spot's node budget per pass")
    ap.add_argument("--drafter", default="portable", help="spot's drafter (spot.load_drafter name or directory)")
    ap.add_argument("--thresholds", default="0.9,0.85",
                    help="threshold rules run beside `one` (0.85: SDAR's default, spot's rule 'family')")
    ap.add_argument("--draft-steps", default="2,4,8,16", help="FreeDave's draft_steps settings")
    ap.add_argument("--eager", default="0,1", help="FreeDave's eager_acceptance_mode settings (0/1)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--freedave-root", default=os.environ.get("FREEDAVE_ROOT"),
                    help="a checkout of FreeDave (default $FREEDAVE_ROOT)")
    ap.add_argument("--sdar-root", default=os.environ.get("SPOT_FAMILY_ROOT"),
                    help="a folder with src/sdar/ (SDAR's files) (default $SPOT_FAMILY_ROOT)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    thresholds = [float(t) for t in a.thresholds.split(",") if t]
    settings_list = [(int(d), bool(int(e))) for e in a.eager.split(",") for d in a.draft_steps.split(",")]
    B, gen = a.block_size, a.max_new_tokens
    dtype = getattr(torch, a.dtype)

    embedded = spot.load_target(a.target, dtype=a.dtype, device=a.device)
    drafter = spot.load_drafter(a.drafter, device=a.device)
    prompts = [embedded.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    settings = dict(max_new_tokens=gen, block_size=B, temperature=0.0, eos_id=None, budget=a.budget)
    n = len(prompts)

    # the peers' code: every reason one cannot run is kept and printed
    unavailable, stand_ins, provenance = {}, [], {}
    sdar_src = Path(a.sdar_root) / "src" / "sdar" if a.sdar_root else None
    fd_root = Path(a.freedave_root) if a.freedave_root else None
    model = sdar_gen = generation = None
    tmp = Path(tempfile.mkdtemp(prefix="spot-peers-sdar-"))
    try:
        if sdar_src is None:
            unavailable["sdar"] = "no --sdar-root / $SPOT_FAMILY_ROOT given (SDAR's files, src/sdar/)"
        elif missing := [f for f in SDAR_FILES if not (sdar_src / f).is_file()]:
            unavailable["sdar"] = f"{sdar_src} lacks {', '.join(missing)}"
        if fd_root is None:
            unavailable["freedave"] = "no --freedave-root / $FREEDAVE_ROOT given (a FreeDave checkout)"
        elif missing := [f for f in FREEDAVE_FILES if not (fd_root / f).is_file()]:
            unavailable["freedave"] = f"{fd_root} lacks {', '.join(missing)}"
        if "sdar" not in unavailable:
            provenance["sdar"] = {"root": str(sdar_src), "files_sha256": file_hashes(sdar_src, SDAR_FILES),
                                  "source": "docs/integrations.md names the repositories and commits"}
            try:
                hf = export_checkpoint(embedded, sdar_src, tmp / "ckpt", dtype, a.device, stand_ins)
                model = PeerModel(hf, embedded.mask_id)
                sdar_gen = load_file(sdar_src / "generate.py", "sdar_generate")
                sdar_gen.sample_with_temperature_topk_topp = greedy_in_own_dtype
                import transformers
                provenance["sdar"]["transformers"] = transformers.__version__
                provenance["sdar"]["model_class"] = f"{type(hf).__module__}.{type(hf).__name__}"
            except Exception as e:  # noqa: BLE001 -- the reason is the report
                import transformers
                reason = (f"SDAR's code cannot load the exported target: {type(e).__name__}: {e} (transformers "
                          f"{transformers.__version__}; SDAR's modeling code runs under 4.57.1, with the folder of "
                          "opencompass/models/sdar_utils.py on PYTHONPATH)")
                unavailable["sdar"] = reason
                unavailable.setdefault("freedave", "needs the SDAR model: " + reason)
        elif "freedave" not in unavailable:
            unavailable["freedave"] = "needs the SDAR model, and SDAR's code is unavailable: " + unavailable["sdar"]
        if "freedave" not in unavailable:
            provenance["freedave"] = {"repository": FREEDAVE_REPOSITORY, "root": str(fd_root), **git_commit(fd_root),
                                      "files_sha256": file_hashes(fd_root, FREEDAVE_FILES)}
            try:
                sys.path.insert(0, str(fd_root))
                core = with_stand_ins(lambda: importlib.import_module("generation.core"), stand_ins)
                generation = core.DLMGeneration(sdpa_additive_attention_mask=False, device=torch.device(a.device))
            except Exception as e:  # noqa: BLE001
                unavailable["freedave"] = f"FreeDave's generation/core.py does not import: {type(e).__name__}: {e}"
        for peer, reason in unavailable.items():
            print(f"{peer}: not run: {reason}")
        for line in stand_ins:
            print(f"stand-in: {line}")

        report = {"rules": {}}
        for rule in ["one"] + [f"threshold:{t:g}" for t in thresholds]:
            threshold = None if rule == "one" else float(rule.split(":")[1])
            rows, peers = [], {}
            standard, counts, orders, sec = run_spot(embedded, prompts, "standard", rule, settings)
            refs = {"standard": standard}
            rows.append(run_row("spot standard", standard, counts, sec, refs))
            for method in ("spot", "oracle"):
                out, counts, _, sec = run_spot(embedded, prompts, method, rule, settings, drafter, orders)
                rows.append(run_row(f"spot {method}", out, counts, sec, refs))
            if sdar_gen is not None and threshold is not None:
                out, counts, sec = peer_runs(lambda p: sdar_dynamic(sdar_gen, model, p, gen, B, threshold), prompts)
                rows.append(run_row(f"SDAR dynamic {threshold:g}", out, counts, sec, refs))
            if generation is not None:
                fd_refs = dict(refs)
                if threshold is not None:  # FreeDave commits c >= T: spot's rule with cmp:ge
                    ge, counts, _, _ = run_spot(embedded, prompts, "standard", f"{rule},cmp:ge", settings)
                    fd_refs = {"standard": ge}
                    peers["standard_ge_equals_standard"] = same = sum(x == y for x, y in zip(ge, standard))
                    if same < n:
                        print(f"note: {rule},cmp:ge gives {rule}'s tokens on {same}/{n} prompts (a confidence at T)")
                try:
                    base, counts, sec = peer_runs(
                        lambda p: freedave_decode(generation, model, p, gen, B, threshold, None), prompts)
                    rows.append(run_row("FreeDave baseline", base, counts, sec, fd_refs))
                    fd_refs["baseline"] = base
                    fd_rows = []
                    for setting in settings_list:
                        out, counts, sec = peer_runs(
                            lambda p: freedave_decode(generation, model, p, gen, B, threshold, setting), prompts)
                        r = run_row(f"FreeDave d{setting[0]}{' eager' if setting[1] else ''}", out, counts, sec,
                                    fd_refs)
                        r["draft_steps"], r["eager_acceptance_mode"] = setting
                        fd_rows.append(r)
                    exact = [r for r in fd_rows if r["exact_vs_baseline"] == n]
                    fewest = min(fd_rows, key=lambda r: r["forwards"])
                    mine = rows[1]  # spot spot
                    if exact:  # its best: the fewest forwards among the settings that reproduce its baseline
                        peers["freedave_best"] = forwards_ratio(min(exact, key=lambda r: r["forwards"]), mine)
                    peers["freedave_fewest"] = forwards_ratio(fewest, mine)
                    rows += fd_rows
                except Exception as e:  # noqa: BLE001
                    peers["freedave_error"] = f"{type(e).__name__}: {e}"
                    print(f"FreeDave failed under rule {rule}: {peers['freedave_error']}")
            report["rules"][rule] = {"rows": rows, **peers}
            print(f"\nrule {rule}: {n} prompts x {gen} tokens, B {B}, budget {a.budget}, {a.dtype}, T 0")
            print(format_rows(rows, n))
            for key, label in (("freedave_best", "best that reproduces its baseline"),
                               ("freedave_fewest", "fewest forwards")):
                if key in peers:
                    f = peers[key]
                    print(f"FreeDave {label}: {f['method']} (its baseline on {f['reproduces_its_baseline']}/{n}); "
                          f"on the {f['prompts']} prompts where it and spot give standard's tokens, its forwards / "
                          f"spot's = {f['forwards']} / {f['spot_forwards']} = {f['ratio']:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if a.json:
        report.update({
            "settings": {**settings, "num_prompts": n, "dtype": a.dtype, "device": a.device, "target": a.target,
                         "drafter": a.drafter, "thresholds": thresholds, "freedave_settings": settings_list,
                         "one_prompt_per_call": True},
            "command": shlex.join([sys.executable] + sys.argv) if argv is None else
            shlex.join(["bench/peers_sdar.py", *argv]),
            "environment": {k: os.environ.get(k) for k in ("PYTHONPATH", "OMP_NUM_THREADS", "SPOT_FAMILY_ROOT",
                                                           "FREEDAVE_ROOT")},
            "provenance": {"spot": {"repository": str(REPO), **git_commit(REPO)}, **provenance},
            "machine": {"platform": platform.platform(), "processor": platform.processor(),
                        "torch": torch.__version__, "threads": torch.get_num_threads(),
                        "cuda": torch.cuda.get_device_name() if a.device.startswith("cuda") else None},
            "unavailable": unavailable, "stand_ins": stand_ins,
            "mask_logit": "the peers read the model with the mask token's logit at -inf, as spot's decoders do",
        })
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
