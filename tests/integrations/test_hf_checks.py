"""Issue #31 ("Trust, round two"), Hugging Face targets:

5. `max_new_tokens` is bounded when a session starts (block_causal: its KV cache; bidirectional: its attention).
9. Ids are checked as ids (NumPy integers accepted, the mask id never the end-of-sequence id), a prompt holding the
   mask id is refused, and so are logits that are not as wide as the vocabulary.
11. A truncated model.safetensors is reported with its directory.
13. A directory holding only pickled weights (pytorch_model.bin) is refused: nothing is unpickled.
"""

import types

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import hf_tiny  # noqa: E402
import spot  # noqa: E402
from spot.hf import HFTarget  # noqa: E402


def _target(layout="block_causal", **kwargs):
    kwargs = {"mask_id": hf_tiny.MASK_ID, "eos_id": hf_tiny.EOS_ID, **kwargs}
    return HFTarget(hf_tiny.model("qwen3"), layout, **kwargs)


class _Logits(hf_tiny.Wrapper):
    """The tiny model with its logits cut to `width` columns, or padded to it."""

    def __init__(self, inner, width):
        super().__init__(inner)
        self.width = width

    def forward(self, input_ids, **kwargs):
        logits = self.inner(input_ids=input_ids, **kwargs).logits
        if self.width <= logits.shape[-1]:
            return types.SimpleNamespace(logits=logits[..., :self.width])
        pad = logits.new_zeros((*logits.shape[:-1], self.width - logits.shape[-1]))
        return types.SimpleNamespace(logits=torch.cat((logits, pad), -1))


# ---- 5. max_new_tokens ---------------------------------------------------------------------------------------------

def test_item5_block_causal_max_new_tokens_is_bounded_by_the_kv_cache():
    with pytest.raises(ValueError, match="max_new_tokens: 100000000 new tokens.*SPOT_KV_CACHE_LIMIT_GB"):
        spot.generate(_target(), [[5, 6]], "standard", max_new_tokens=10**8, block_size=4)


def test_item5_bidirectional_max_new_tokens_is_bounded_by_its_attention():
    with pytest.raises(ValueError, match="max_new_tokens: 1000000 new tokens.*SPOT_MEMORY_LIMIT_GB"):
        spot.generate(_target("bidirectional"), [[5, 6]], "standard", max_new_tokens=10**6, block_size=4)


# ---- 9. ids, prompts, logits ---------------------------------------------------------------------------------------

def test_item9_mask_id_equal_to_eos_id_is_refused():
    with pytest.raises(ValueError, match="mask_id, eos_id: .*must differ"):
        _target(mask_id=hf_tiny.EOS_ID)


def test_item9_numpy_integer_ids_are_ids():
    t = _target(mask_id=np.int64(hf_tiny.MASK_ID), eos_id=np.int32(hf_tiny.EOS_ID))
    assert (t.mask_id, t.eos_id) == (hf_tiny.MASK_ID, hf_tiny.EOS_ID) and type(t.mask_id) is int
    for bad in (96, -1, 95.0, True):
        with pytest.raises(ValueError, match="mask_id: expected a token id in \\[0, 96\\)"):
            _target(mask_id=bad)


def test_item9_a_prompt_holding_the_mask_id_is_refused():
    with pytest.raises(ValueError, match="prompts\\[1\\]: holds the mask id 95"):
        spot.generate(_target(), [[5, 6], [7, hf_tiny.MASK_ID, 8]], "standard", max_new_tokens=4, block_size=4)


@pytest.mark.parametrize("width", [80, 104])
def test_item9_logits_narrower_or_wider_than_the_vocabulary_are_refused(width):
    t = HFTarget(_Logits(hf_tiny.model("qwen3"), width), mask_id=hf_tiny.MASK_ID, eos_id=hf_tiny.EOS_ID,
                 self_check=False)
    with pytest.raises(ValueError, match=f"logits over {width} tokens.*vocabulary.*96"):
        spot.generate(t, [[5, 6]], "standard", max_new_tokens=4, block_size=4)


# ---- 11, 13. files -------------------------------------------------------------------------------------------------

def test_item11_a_truncated_safetensors_file_is_named(tmp_path):
    hf_tiny.model("qwen3").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ValueError, match=f"{tmp_path}: cannot read its weights"):
        spot.load_target(str(tmp_path), mask_id=hf_tiny.MASK_ID)


def test_item13_pickled_weights_are_refused(tmp_path):
    model = hf_tiny.model("qwen3")
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickled weights only \\(pytorch_model.bin\\).*safetensors"):
        spot.load_target(str(tmp_path), mask_id=hf_tiny.MASK_ID)
