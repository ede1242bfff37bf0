"""Tiny random Hugging Face models for the HFTarget and integration tests (imported by them; not a test file).

Weights are scaled so predictions are peaked and drafted trees are accepted; float64 so that exactness tests do
not hinge on rounding."""

import functools
import types

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

VOCAB = 96
MASK_ID = 95
EOS_ID = 2
PROMPTS = [[5, 9, 14, 20, 33], [7, 8], [3, 50, 60, 70, 80, 90, 11, 12, 13]]


def config(arch: str, attn: str = "sdpa", **overrides):
    shape = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False,
                 eos_token_id=EOS_ID, pad_token_id=0)
    shape.update(overrides)
    cfg = Qwen3Config(head_dim=8, **shape) if arch == "qwen3" else LlamaConfig(**shape)
    cfg._attn_implementation = attn
    return cfg


@functools.lru_cache(maxsize=None)
def model(arch: str, attn: str = "sdpa", seed: int = 0, scale: float = 30.0, dtype=torch.float64):
    """A tiny random causal LM (arch "qwen3" or "llama") whose LM head is scaled by `scale` (peaked predictions).
    Cached: callers must not modify it."""
    torch.manual_seed(seed)
    cls = Qwen3ForCausalLM if arch == "qwen3" else LlamaForCausalLM
    m = cls(config(arch, attn))
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)
    return m.to(dtype).eval()


class Wrapper(torch.nn.Module):
    """A model around `inner`, with its config and output embeddings: the base of the wrappers that change what
    `inner`'s forward is handed or returns."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


class IgnoresMask(Wrapper):
    """A model that drops the attention mask it is given (as some remote-code DLMs do)."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        return self.inner(input_ids=input_ids, position_ids=position_ids, past_key_values=past_key_values,
                          use_cache=use_cache)


class Float64LM(torch.nn.Module):
    """A one-layer attention LM that computes every operation in float64 (unlike transformers' models, whose RoPE,
    RMSNorm and eager softmax run in float32 whatever their dtype), reading a 4D bool mask and position ids. No
    cache: for the bidirectional layout."""

    def __init__(self, vocab: int = VOCAB, dim: int = 16, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        kw = dict(dtype=torch.float64)
        self.embed, self.pos = torch.nn.Embedding(vocab, dim, **kw), torch.nn.Embedding(64, dim, **kw)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False, **kw)
        self.head = torch.nn.Linear(dim, vocab, bias=False, **kw)
        with torch.no_grad():
            self.head.weight.mul_(10.0)
        self.config = types.SimpleNamespace(_attn_implementation="sdpa", vocab_size=vocab)

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1])[None]
        x = self.embed(input_ids) + self.pos(position_ids)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask[:, 0], -torch.inf)
        x = x + torch.softmax(scores, dim=-1) @ v
        return types.SimpleNamespace(logits=self.head(x))


class BatchJitter(Wrapper):
    """`inner` whose logits move by `size` x the logit scale x (tokens in the call) / 64: a change that follows the
    call's shape, of a chosen size, as rounding in a precision coarser than the logits' does."""

    def __init__(self, inner, size: float):
        super().__init__(inner)
        self.size = size

    def forward(self, input_ids, **kwargs):
        logits = self.inner(input_ids=input_ids, **kwargs).logits
        shift = self.size * (1 + logits.abs().max()) * input_ids.numel() / 64
        return types.SimpleNamespace(logits=logits + shift)


def save_tokenizer(directory, words=VOCAB):
    """A word-level tokenizer over ids 0..words-1 ("<pad>", "<unk>", "</s>", "w3", ..., "<mask>" last), saved
    with save_pretrained."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, words - 1)}, "<mask>": words - 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="</s>")
    fast.save_pretrained(directory)
    return fast


class LLaDA2StandIn(torch.nn.Module):
    """A stand-in for LLaDA2's model as diffusers' LLaDA2Pipeline calls it: model(ids, attention_mask=<2D>,
    position_ids=...) -> .logits, never predicting the mask token. Counts its calls.

    It reads the 2D mask as LLaDA2's own code does (modeling_llada2_moe.py, checked on transformers 4.57.1, see
    docs/integrations.md): its attention is not causal, so an all-ones 2D mask means no mask at all (every token of
    the window sees every other: fully bidirectional, NOT the block-causal attention of its own generate(), which
    passes a 4D mask), and a 2D mask with zeros becomes transformers' token-causal padding mask."""

    def __init__(self, inner, block_length: int, mask_id: int = MASK_ID):
        super().__init__()
        self.inner, self.config, self.block_length, self.mask_id = inner, inner.config, block_length, mask_id
        self.calls = 0

    @property
    def device(self):  # diffusers pipelines ask their modules for it
        return self.inner.device

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        self.calls += 1
        b, n = input_ids.shape
        if attention_mask is None or bool(attention_mask.bool().all()):
            visible = torch.ones((b, 1, n, n), dtype=torch.bool, device=input_ids.device)
        else:
            causal = torch.ones((n, n), dtype=torch.bool, device=input_ids.device).tril()
            visible = (causal[None] & attention_mask.bool()[:, None, :])[:, None]
            visible = visible | torch.eye(n, dtype=torch.bool, device=input_ids.device)  # no empty row
        out = self.inner(input_ids=input_ids, attention_mask=visible, position_ids=position_ids)
        out.logits[..., self.mask_id] = float("-inf")
        return out


def wide_model(vocab: int = 40001, seed: int = 0):
    """A tiny Llama over a vocabulary past int16's range, whose LM head favours the ids above 32768."""
    torch.manual_seed(seed)
    m = LlamaForCausalLM(config("llama", vocab_size=vocab, hidden_size=16, intermediate_size=32,
                                num_hidden_layers=1)).eval()
    with torch.no_grad():
        m.lm_head.weight[2**15:] += 0.5 * m.lm_head.weight[2**15:].abs().mean() + 0.2
    return m
