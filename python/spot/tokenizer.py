"""The embedded target's byte-level BPE tokenizer: `load_tokenizer()` loads the shipped assets/tokenizer.json.

Ids 0, 1, 2 are the special tokens ``<|pad|>``, ``<|eos|>``, ``<|mask|>``; then the 256 byte symbols; then merges.
No normaliser, no lowercasing: decode(encode(text)) == text. The pre-tokeniser keeps a newline together with the
indentation that follows it, keeps ``snake_case`` identifiers whole, and splits numbers into single digits.
Training it, and encoding a corpus for target training, is the offline pipeline's job (`spot.lab.pipeline.tokenizer`).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["PAD", "EOS", "MASK", "SPECIAL_TOKENS", "PRETOKENIZE_PATTERN", "DEFAULT_PATH", "Tokenizer", "load_tokenizer"]

PAD, EOS, MASK = "<|pad|>", "<|eos|>", "<|mask|>"
SPECIAL_TOKENS = (PAD, EOS, MASK)  # ids 0, 1, 2 in this order
DEFAULT_PATH = Path(__file__).resolve().parent / "assets" / "tokenizer.json"

# Pre-tokenisation (Oniguruma syntax, applied before the byte-level mapping). In order of preference:
# English contractions; an identifier/word with at most one leading space (letters, digits, underscores, starting
# with a letter or underscore); one digit with an optional leading space; a run of punctuation with an optional
# leading space; a newline with the indentation after it; a run of spaces not followed by a non-space (so the last
# space of a run joins the next word); any other whitespace.
PRETOKENIZE_PATTERN = (
    r"'(?:s|t|re|ve|m|ll|d)(?!\p{L})"
    r"| ?[\p{L}_][\p{L}\p{N}_]*"
    r"| ?\p{N}"
    r"| ?[^\s\p{L}\p{N}_]+"
    r"|\n[ \t]*"
    r"|[ \t]+(?!\S)"
    r"|\s+"
)


def _require_tokenizers():
    try:
        import tokenizers  # noqa: F401
    except ImportError as e:  # pragma: no cover - declared dependency
        raise ImportError("spot.tokenizer needs the 'tokenizers' package (pip install tokenizers)") from e
    return tokenizers


class Tokenizer:
    """Thin wrapper around a ``tokenizers.Tokenizer`` with the project's special ids."""

    def __init__(self, backend, path: str | os.PathLike | None = None):
        self._tk = backend
        self.path = None if path is None else Path(path)
        ids = [backend.token_to_id(t) for t in SPECIAL_TOKENS]
        if ids != [0, 1, 2]:
            raise ValueError(f"tokenizer: special tokens {SPECIAL_TOKENS} must have ids [0, 1, 2], got {ids}")
        self.pad_id, self.eos_id, self.mask_id = ids
        self.special_ids = frozenset(ids)

    @property
    def vocab_size(self) -> int:
        return self._tk.get_vocab_size(with_added_tokens=True)

    @property
    def backend(self):
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tk

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, path={str(self.path) if self.path else None!r})"

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added). The literal strings ``<|pad|>``, ``<|eos|>`` and
        ``<|mask|>`` in ``text`` are encoded as the special tokens."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        return self._tk.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of str")
        return [e.ids for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``. Special tokens are dropped unless ``skip_special_tokens=False``, which renders them as
        ``<|pad|>`` / ``<|eos|>`` / ``<|mask|>`` (useful to show a partly decoded block)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids: token ids must be in [0, {self.vocab_size}), got {bad[:5]}")
        if skip_special_tokens:
            return self._tk.decode(ids, skip_special_tokens=True)
        # keep special tokens in place, decoding the ordinary runs between them byte-exactly
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self.special_ids:
                if run:
                    out.append(self._tk.decode(run, skip_special_tokens=False))
                    run = []
                out.append(SPECIAL_TOKENS[i])
            else:
                run.append(i)
        if run:
            out.append(self._tk.decode(run, skip_special_tokens=False))
        return "".join(out)

    def id_to_token(self, i: int) -> str | None:
        return self._tk.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        return self._tk.token_to_id(token)

    def fingerprint(self) -> str:
        """SHA-256 of the serialised tokenizer (identifies it in token caches)."""
        return hashlib.sha256(self._tk.to_str().encode("utf-8")).hexdigest()

    def save(self, path: str | os.PathLike) -> None:
        from .files import atomic_write_text, check_output_path

        path = check_output_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # pretty=False keeps the shipped file small; sort is deterministic in the library
        atomic_write_text(path, self._tk.to_str(pretty=False) + "\n")


def load_tokenizer(path: str | os.PathLike | None = None) -> Tokenizer:
    """Load a tokenizer JSON (default: the one shipped in ``spot/assets/tokenizer.json``), read under spot.files'
    input-file rule (a regular file under a size cap, never waited on). Raises FileNotFoundError when the file is
    missing, ValueError naming it when it is no tokenizer."""
    from .files import read_input_text

    tokenizers = _require_tokenizers()
    p = Path(path) if path is not None else DEFAULT_PATH
    if not p.exists():
        raise FileNotFoundError(f"tokenizer file not found: {p} (build it with `spot build tokenizer`)")
    text = read_input_text(p)
    try:
        backend = tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # noqa: BLE001 (the tokenizers library raises its own Exception type)
        raise ValueError(f"{p}: not a tokenizer JSON ({' '.join(str(e).split())[:200]})") from None
    return Tokenizer(backend, p)
