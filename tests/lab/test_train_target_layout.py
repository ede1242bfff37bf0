"""The training windows of `spot build target`: the "padded" layout ends each window's text at its first <|eos|>
(<|eos|> fills the rest, as instruction tuning pads a response); "stream" leaves the documents running on."""
import numpy as np
import pytest
import torch
from spot.lab.pipeline.train_target import TokenWindows, TrainConfig, train
from spot.model import ModelConfig

EOS = 1


def stream(seed=0, docs=200):
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(docs):
        parts += [rng.integers(3, 50, size=int(rng.integers(1, 12))), np.array([EOS])]
    return np.concatenate(parts).astype(np.uint16)


def test_padded_windows_are_the_stream_windows_cut_at_their_first_eos():
    tokens = stream()
    plain = TokenWindows(tokens, 16, seed=3).batch(7, 32)
    padded = TokenWindows(tokens, 16, seed=3, pad_after=EOS).batch(7, 32)
    cut_somewhere = False
    for p, q in zip(plain.tolist(), padded.tolist()):
        end = p.index(EOS) if EOS in p else len(p)
        assert q == p[:end] + [EOS] * (len(p) - end)  # the text before the first <|eos|> is untouched
        cut_somewhere |= end < len(p) - 1 and any(t != EOS for t in p[end + 1:])
    assert cut_somewhere  # the stream windows did run on into a next document, so the cut was exercised


def test_padded_windows_are_deterministic_per_batch_index():
    w = TokenWindows(stream(), 16, seed=3, pad_after=EOS)
    assert torch.equal(w.batch(5, 8), w.batch(5, 8))
    assert not torch.equal(w.batch(5, 8), w.batch(6, 8))


def test_an_unknown_layout_is_refused_before_training(tmp_path):
    mcfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, pad_id=0, eos_id=EOS,
                       mask_id=2)
    with pytest.raises(ValueError, match="layout must be 'stream' or 'padded'"):
        train(mcfg, TrainConfig(seq_len=16, batch_size=2, steps=1, layout="sft"), stream(), stream(1), tmp_path,
              progress=False)
