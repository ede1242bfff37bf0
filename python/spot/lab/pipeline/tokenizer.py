"""Training the embedded target's byte-level BPE tokenizer, and the token streams the target trains on.

* ``train_tokenizer(corpus_dir, vocab_size=4096)`` trains a byte-level BPE (``tokenizers`` library) on the train
  split of a corpus built by ``spot build corpus``; the result loads with ``spot.tokenizer.Tokenizer``.
* ``encode_documents(corpus_dir, tokenizer, split)`` -> ``numpy.uint16`` ids of a split with ``<|eos|>`` after every
  document, cached as ``tokens_<split>.npy`` next to the corpus.

Command: ``spot build tokenizer`` (``--out`` defaults to a working folder; writing the shipped asset needs
``--out python/spot/assets/tokenizer.json``).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from ...tokenizer import PRETOKENIZE_PATTERN, SPECIAL_TOKENS, Tokenizer, _require_tokenizers, load_tokenizer

DEFAULT_VOCAB_SIZE = 4096


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
        from ...loading import atomic_write_text, check_output_path  # torch: only when writing

        check_output_path(npy)
        tmp = npy.with_suffix(".tmp.npy")
        np.save(tmp, arr, allow_pickle=False)
        os.replace(tmp, npy)
        meta = dict(key, tokens=int(arr.size), documents=n_docs)
        atomic_write_text(meta_path, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return arr
