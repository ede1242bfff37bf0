"""Byte-level BPE tokenizer of the embedded target, and the token streams it is trained on.

* ``train_tokenizer(corpus_dir, vocab_size=4096)`` trains a byte-level BPE (``tokenizers`` library) on the train
  split of a corpus built by ``spot.corpus``. Ids 0, 1, 2 are the special tokens ``<|pad|>``, ``<|eos|>``,
  ``<|mask|>``; then the 256 byte symbols; then merges. No normaliser, no lowercasing: decode(encode(text)) == text.
  The pre-tokeniser keeps a newline together with the indentation that follows it (``"\\n" + 8 spaces`` is one
  piece, and usually one token), keeps ``snake_case`` identifiers whole, and splits numbers into single digits.
* ``load_tokenizer(path=None)`` loads the shipped ``spot/assets/tokenizer.json`` (or ``path``) into ``Tokenizer``.
* ``encode_documents(corpus_dir, tokenizer, split)`` -> ``numpy.uint16`` ids of a split with ``<|eos|>`` after every
  document, cached as ``tokens_<split>.npy`` next to the corpus.

Command: ``python -m spot.tokenizer --corpus .cache/corpus --out python/spot/assets/tokenizer.json --encode``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

__all__ = [
    "PAD", "EOS", "MASK", "SPECIAL_TOKENS", "PRETOKENIZE_PATTERN", "DEFAULT_PATH",
    "Tokenizer", "load_tokenizer", "train_tokenizer", "encode_documents",
]

PAD, EOS, MASK = "<|pad|>", "<|eos|>", "<|mask|>"
SPECIAL_TOKENS = (PAD, EOS, MASK)  # ids 0, 1, 2 in this order
DEFAULT_VOCAB_SIZE = 4096
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


def _empty_bpe():
    tokenizers = _require_tokenizers()
    from tokenizers import Regex, decoders, models, pre_tokenizers

    tk = tokenizers.Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
    ])
    tk.decoder = decoders.ByteLevel()
    return tk


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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # pretty=False keeps the shipped file small; sort is deterministic in the library
        path.write_text(self._tk.to_str(pretty=False) + "\n", encoding="utf-8")


def load_tokenizer(path: str | os.PathLike | None = None) -> Tokenizer:
    """Load a tokenizer JSON (default: the one shipped in ``spot/assets/tokenizer.json``).
    Raises FileNotFoundError when the file is missing."""
    tokenizers = _require_tokenizers()
    p = Path(path) if path is not None else DEFAULT_PATH
    if not p.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {p} (build it with `python -m spot.tokenizer`)")
    return Tokenizer(tokenizers.Tokenizer.from_file(str(p)), p)


def _iter_texts(corpus_dir: str | os.PathLike, split: str) -> Iterator[str]:
    from .corpus import read_documents

    for rec in read_documents(corpus_dir, split):
        yield rec["text"]


def train_tokenizer(corpus_dir: str | os.PathLike, vocab_size: int = DEFAULT_VOCAB_SIZE,
                    min_frequency: int = 2, texts: Iterable[str] | None = None) -> Tokenizer:
    """Train the byte-level BPE on the train split of ``corpus_dir`` (or on ``texts`` when given).

    Deterministic: the same texts in the same order give the same file (checked by the tests and by training twice)."""
    if vocab_size < len(SPECIAL_TOKENS) + 256 + 1:
        raise ValueError(f"vocab_size must be > {len(SPECIAL_TOKENS) + 256}, got {vocab_size}")
    if vocab_size > 65536:
        raise ValueError(f"vocab_size must be <= 65536 (token streams are uint16), got {vocab_size}")
    _require_tokenizers()
    from tokenizers import pre_tokenizers, trainers

    tk = _empty_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    if texts is None:
        texts = _iter_texts(corpus_dir, "train")
    tk.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(tk)


def _split_fingerprint(corpus_dir: Path, split: str) -> str:
    """The corpus manifest's checksum of the split file when present, else a hash of the file."""
    man = corpus_dir / "manifest.json"
    if man.is_file():
        try:
            return json.loads(man.read_text())["splits"][split]["sha256"]
        except (KeyError, ValueError):
            pass
    h = hashlib.sha256()
    with open(corpus_dir / f"{split}.jsonl", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def encode_documents(corpus_dir: str | os.PathLike, tokenizer: Tokenizer | None = None, split: str = "train",
                     cache: bool = True, batch_docs: int = 2048) -> np.ndarray:
    """All documents of ``split`` as one ``uint16`` array: doc_0 <|eos|> doc_1 <|eos|> ... doc_n <|eos|>.

    With ``cache`` the array is saved as ``<corpus_dir>/tokens_<split>.npy`` (plus a ``.json`` key naming the
    tokenizer and corpus checksums) and reused while both match."""
    from .corpus import SPLITS, read_documents

    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tok = tokenizer if tokenizer is not None else load_tokenizer()
    if not isinstance(tok, Tokenizer):
        raise TypeError(f"tokenizer must be a spot.tokenizer.Tokenizer, got {type(tok).__name__}")
    if tok.vocab_size > 65536:
        raise ValueError(f"tokenizer vocab_size {tok.vocab_size} does not fit uint16")
    corpus_dir = Path(corpus_dir)
    npy = corpus_dir / f"tokens_{split}.npy"
    meta_path = corpus_dir / f"tokens_{split}.json"
    key = {"tokenizer_sha256": tok.fingerprint(), "corpus_sha256": _split_fingerprint(corpus_dir, split),
           "layout": "doc <|eos|> per document", "eos_id": tok.eos_id}
    if cache and npy.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        if all(meta.get(k) == v for k, v in key.items()):
            return np.load(npy, allow_pickle=False)

    parts: list[np.ndarray] = []
    batch: list[str] = []
    n_docs = 0
    eos = np.array([tok.eos_id], dtype=np.uint16)

    def flush():
        for ids in tok.encode_batch(batch):
            parts.append(np.asarray(ids, dtype=np.uint16))
            parts.append(eos)
        batch.clear()

    for rec in read_documents(corpus_dir, split):
        batch.append(rec["text"])
        n_docs += 1
        if len(batch) >= batch_docs:
            flush()
    if batch:
        flush()
    arr = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
    if cache:
        tmp = npy.with_suffix(".tmp.npy")
        np.save(tmp, arr, allow_pickle=False)
        os.replace(tmp, npy)
        meta = dict(key, tokens=int(arr.size), documents=n_docs)
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return arr


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spot.tokenizer", description="train the byte-level BPE tokenizer")
    ap.add_argument("--corpus", required=True, help="corpus folder built by `python -m spot.corpus`")
    ap.add_argument("--out", default=str(DEFAULT_PATH), help="tokenizer JSON to write (default: the shipped asset)")
    ap.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    ap.add_argument("--min-frequency", type=int, default=2)
    ap.add_argument("--encode", action="store_true",
                    help="also write tokens_train.npy / tokens_heldout.npy into the corpus folder")
    ap.add_argument("--encode-only", action="store_true", help="skip training; encode with the tokenizer at --out")
    a = ap.parse_args(argv)
    if a.encode_only:
        tok = load_tokenizer(a.out)
    else:
        t0 = time.perf_counter()
        tok = train_tokenizer(a.corpus, vocab_size=a.vocab_size, min_frequency=a.min_frequency)
        tok.save(a.out)
        print(f"trained tokenizer (vocab {tok.vocab_size}) in {time.perf_counter() - t0:.1f}s -> {a.out} "
              f"({Path(a.out).stat().st_size / 1e3:.0f} KB, sha256 {tok.fingerprint()[:16]})")
        tok = load_tokenizer(a.out)
    if a.encode or a.encode_only:
        for split in ("train", "heldout"):
            t0 = time.perf_counter()
            arr = encode_documents(a.corpus, tok, split)
            print(f"{split}: {arr.size} tokens ({time.perf_counter() - t0:.1f}s) -> "
                  f"{Path(a.corpus) / f'tokens_{split}.npy'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
