"""Command-line pieces shared by `spot` (spot/cli.py) and `spot build` (spot/build/cli.py): which target to load,
and how a prompts file reads. Here rather than in spot/cli.py, which routes `spot build` to the pipeline's parser:
the pipeline importing spot/cli.py back would close an import cycle."""

from __future__ import annotations

import argparse

from .loading import DTYPES, load_target


def add_target_args(p: argparse.ArgumentParser) -> None:
    """Which target to load, where, and the noise seed: shared by every command that runs the target."""
    p.add_argument("--target", default="default", help="'default' (embedded), 'random', a weights directory, or a "
                   "Hugging Face checkpoint directory (config.json + weights; nothing is downloaded)")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    hf = p.add_argument_group("Hugging Face targets (--target DIR with a config.json)")
    hf.add_argument("--layout", default="block_causal", choices=("block_causal", "bidirectional"),
                    help="block_causal: SDAR / BD3-LM / LLaDA2 (KV-cached prefix); bidirectional: LLaDA / Dream")
    hf.add_argument("--mask-token", help="the mask token's text (default: the tokenizer's or config's mask token)")
    hf.add_argument("--mask-id", type=int, help="the mask token's id (instead of --mask-token)")
    hf.add_argument("--logits-shift", type=int, default=0, choices=(0, 1),
                    help="1 for models whose logit for position i is read at i - 1 (Dream)")
    hf.add_argument("--trust-remote-code", action="store_true",
                    help="run the checkpoint's own modelling code (LLaDA, Dream, SDAR, LLaDA2); only for code you "
                    "trust")
    hf.add_argument("--family", default="auto", choices=("auto", "generic", "llada", "dream", "sdar", "llada2",
                                                         "bd3lm"),
                    help="auto: the family target config.json names (LLaDA, Dream, SDAR, LLaDA2), else the generic "
                    "path (--layout, --logits-shift); generic: always the generic path")
    hf.add_argument("--attn-implementation", help="transformers' attn_implementation (default: sdpa on the generic "
                    "path, the model's own default for a family)")


def target_from_args(a):
    """The target of --target with its flags; the Hugging Face flags apply to checkpoint directories only."""
    from .hf import is_hf_directory
    if a.target in ("default", "random") or not is_hf_directory(a.target):
        return load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
    try:
        return load_target(a.target, dtype=a.dtype, device=a.device, layout=a.layout, mask_token=a.mask_token,
                           mask_id=a.mask_id, logits_shift=a.logits_shift, trust_remote_code=a.trust_remote_code,
                           family=a.family, attn_implementation=a.attn_implementation)
    except (FileNotFoundError, ValueError, ImportError, NotImplementedError) as e:
        raise SystemExit(f"--target {a.target}: {e}") from None


def read_prompts_file(path) -> list[str]:
    """The non-blank lines of a UTF-8 prompts file (\\n escapes as newlines); errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            texts = [line.rstrip("\n").replace("\\n", "\n") for line in f if line.strip()]
    except UnicodeDecodeError as e:
        raise SystemExit(f"--prompts-file {path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise SystemExit(f"--prompts-file {path}: cannot read it ({e.strerror or e})") from None
    if not texts:
        raise SystemExit(f"--prompts-file {path}: holds no prompts (every line is blank)")
    return texts
