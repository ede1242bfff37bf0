"""Command-line pieces shared by `spot` (spot/cli.py) and `spot build` (spot/lab/pipeline/cli.py): the parser class
whose errors are one line, which target to load, which device, and how a prompts file reads. Here rather than in
spot/cli.py, which routes `spot build` to the pipeline's parser: the pipeline importing spot/cli.py back would close
an import cycle."""

from __future__ import annotations

import argparse

from .loading import DTYPES, SHIPPED_TARGETS, load_target


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line too (`spot: error: argument --x: ...`, exit code 2);
    --help still prints the usage. Sub-parsers are of the same class."""

    def error(self, message):
        self.exit(2, f"spot: error: {' '.join(message.split())} (`{self.prog} --help` for usage)\n")


def add_target_args(p: argparse.ArgumentParser) -> None:
    """Which target to load, where, and the noise seed: shared by every command that runs the target."""
    p.add_argument("--target", default="default", help="'default' (embedded), 'random', a weights directory, or a "
                   "Hugging Face checkpoint directory (config.json + weights; nothing is downloaded)")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    hf = p.add_argument_group("Hugging Face targets (--target DIR with a config.json)")
    hf.add_argument("--layout", choices=("block_causal", "bidirectional"),
                    help="generic path only: block_causal (default; KV-cached prefix) or bidirectional")
    hf.add_argument("--mask-token", help="the mask token's text (default: the tokenizer's or config's mask token)")
    hf.add_argument("--mask-id", type=int, help="the mask token's id (instead of --mask-token)")
    hf.add_argument("--logits-shift", type=int, choices=(0, 1),
                    help="generic path only: 1 for models whose logit for position i is read at i - 1")
    hf.add_argument("--trust-remote-code", action="store_true",
                    help="run the checkpoint's own modelling code (LLaDA, Dream, SDAR, LLaDA2); only for code you "
                    "trust")
    hf.add_argument("--family", choices=("auto", "generic", "llada", "dream", "sdar", "llada2", "bd3lm"),
                    help="auto (default): the family target config.json names (LLaDA, Dream, SDAR, LLaDA2), else "
                    "the generic path (--layout, --logits-shift); generic: always the generic path. A family other "
                    "than the one config.json names is refused unless --force-family")
    hf.add_argument("--force-family", action="store_true",
                    help="run the checkpoint as the --family named even though its config.json names another "
                    "(its tokens may differ from its own family's)")
    hf.add_argument("--attn-implementation", help="transformers' attn_implementation (default: sdpa on the generic "
                    "path, the model's own default for a family)")


# Flags that only a Hugging Face checkpoint directory reads: given for another target they are refused, not ignored.
HF_FLAGS = ("layout", "mask_token", "mask_id", "logits_shift", "trust_remote_code", "family", "force_family",
            "attn_implementation")


def check_device(device: str) -> None:
    """--device names a torch device that this machine has, else a one-line error (not torch's traceback)."""
    import torch
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise SystemExit(f"--device: not a torch device: {device!r} (e.g. cpu, cuda, cuda:1)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: no CUDA GPU is available here (torch.cuda.is_available() is False)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise SystemExit(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type not in ("cpu", "cuda"):
        raise SystemExit(f"--device {device}: spot runs on cpu or cuda devices")


def target_from_args(a):
    """The target of --target with its flags; the Hugging Face flags apply to checkpoint directories only (given
    for another target, they are refused rather than ignored)."""
    from .hf import is_hf_directory
    check_device(a.device)
    given = [name for name in HF_FLAGS if getattr(a, name, None) not in (None, False)]
    if a.target in (*SHIPPED_TARGETS, "random") or not is_hf_directory(a.target):
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise SystemExit(f"{flag}: applies to Hugging Face checkpoint directories only, not --target {a.target}")
        try:
            return load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(_target_error(a.target, e)) from None
    try:
        return load_target(a.target, dtype=a.dtype, device=a.device, layout=a.layout or "block_causal",
                           mask_token=a.mask_token, mask_id=a.mask_id, logits_shift=a.logits_shift or 0,
                           trust_remote_code=a.trust_remote_code, family=a.family or "auto",
                           force_family=a.force_family, attn_implementation=a.attn_implementation)
    except (FileNotFoundError, ValueError, TypeError, ImportError, NotImplementedError) as e:
        raise SystemExit(_target_error(a.target, e)) from None


def _target_error(target: str, error: Exception) -> str:
    """`--target DIR: message`, the directory said once when the message starts with it."""
    message = str(error)
    return f"--target {message}" if message.startswith(str(target)) else f"--target {target}: {message}"


PROMPTS_FILE_LIMIT_MB = 64  # a prompts file is read whole, up to this size (spot.files' input-file rule)


def read_prompts_file(path) -> list[str]:
    """The non-blank lines of a UTF-8 prompts file (\\n escapes as newlines): a regular file of at most
    PROMPTS_FILE_LIMIT_MB, opened without blocking (spot.files.read_input_text); errors name the file."""
    from .files import read_input_text

    try:
        text = read_input_text(path, PROMPTS_FILE_LIMIT_MB)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--prompts-file {e}") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # universal newlines, as open() reads
    texts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if not texts:
        raise SystemExit(f"--prompts-file {path}: holds no prompts (every line is blank)")
    return texts
