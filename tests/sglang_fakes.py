"""Fakes for the SGLang plug-in tests (tests/integrations/test_sglang.py): a tiny two-layer block-diffusion LM, a
model runner with a paged K/V pool that honours the Triton backend's flat custom mask, a one-commit-per-pass
`spot.Target` over the same model (no cache: the independent reference), and a small FDFO scheduler loop.

The runner mirrors what SGLang's Triton extend attention does with a tree batch: K/V of every forward token are
written to `out_cache_loc` first (slot 0 is the padding slot), the prefix is read from the pool through
`req_to_token`, the forward's own tokens are read densely from its k/v, and `custom_mask[mask_indptr[r]:]` viewed
as [q_len, prefix + q_len] decides who attends whom (no mask: every token sees the prefix and its whole block, the
dLLM default). So a block whose final tokens were never forwarded leaves wrong K/V for the next block, and the
tokens would differ from the reference.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import torch

from spot.target import Session, Target


class TinyLM:
    """Two layers of single-head attention over token + position embeddings. Predictions depend mostly on the
    position (so drafted commit orders are often right) and a little on the other tokens and the prefix."""

    def __init__(self, vocab: int = 40, d: int = 16, layers: int = 2, max_pos: int = 256, seed: int = 0,
                 mix: float = 0.35, sharp: float = 2.5, dtype=torch.float64):
        g = torch.Generator().manual_seed(seed)

        def rand(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)

        self.vocab, self.d, self.layers, self.mix, self.dtype = vocab, d, layers, mix, dtype
        self.mask_id = vocab - 1
        self.emb, self.pos = rand(vocab, d), rand(max_pos, d)
        self.w = [[rand(d, d, scale=1 / math.sqrt(d)) for _ in range(4)] for _ in range(layers)]
        self.head = rand(d, vocab, scale=sharp / math.sqrt(d))

    def embed(self, ids, pos):
        return self.emb[ids] + self.pos[pos]

    def qkv(self, layer, h):
        wq, wk, wv, _ = self.w[layer]
        return h @ wq, h @ wk, h @ wv

    def mix_in(self, layer, h, attn):
        return h + self.mix * torch.tanh(attn @ self.w[layer][3])

    def logits(self, h):
        z = h @ self.head
        z[:, self.mask_id] = -1e4  # the mask token is never a prediction (as in a trained model)
        return z

    @staticmethod
    def attend(q, k, v, allowed):
        s = (q @ k.T) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~allowed, float("-inf"))
        return torch.softmax(s, -1) @ v

    def dense(self, ids, block_size):
        """No cache: logits [T, V] of a whole sequence under block-causal attention (query block >= key block),
        which is what a paged cache of block-by-block forwards computes."""
        pos = torch.arange(len(ids))
        blk = pos // block_size
        allowed = blk[None, :] <= blk[:, None]
        h = self.embed(ids, pos)
        for layer in range(self.layers):
            q, k, v = self.qkv(layer, h)
            h = self.mix_in(layer, h, self.attend(q, k, v, allowed))
        return self.logits(h)


class FakeAttnBackend:
    """Planning = an extend without a custom mask; Spot sets custom_mask / mask_indptr after planning."""

    def __init__(self):
        self.forward_metadata = None
        self.plans = 0

    def init_forward_metadata(self, fb):
        self.plans += 1
        self.forward_metadata = SimpleNamespace(custom_mask=None, mask_indptr=None,
                                                max_extend_len=max(_extend_lens(fb)))


class FakeRunner:
    """ModelRunner.forward over a paged K/V pool (see the module docstring)."""

    def __init__(self, model: TinyLM, slots: int = 4096, max_reqs: int = 16, max_len: int = 512):
        self.model = model
        self.attn_backend = FakeAttnBackend()
        self.k = [torch.zeros(slots, model.d, dtype=model.dtype) for _ in range(model.layers)]
        self.v = [torch.zeros(slots, model.d, dtype=model.dtype) for _ in range(model.layers)]
        self.req_to_token = torch.zeros(max_reqs, max_len, dtype=torch.long)
        self.forwards = 0
        self.tokens = 0
        self.batches = []  # (num tokens, extend lens) per forward

    def forward(self, fb, pp_proxy_tensors=None):
        if not getattr(fb, "forward_metadata_ready", False):
            self.attn_backend.init_forward_metadata(fb)
        md = self.attn_backend.forward_metadata
        m = self.model
        ids, pos = fb.input_ids.long(), fb.positions.long()
        ext, prefix = _extend_lens(fb), list(fb.extend_prefix_lens_cpu)
        loc = fb.out_cache_loc.long()
        h = m.embed(ids, pos)
        for layer in range(m.layers):
            q, k, v = m.qkv(layer, h)
            self.k[layer][loc], self.v[layer][loc] = k, v
            out, off = torch.empty_like(q), 0
            for r, (e, p) in enumerate(zip(ext, prefix)):
                slots = self.req_to_token[int(fb.req_pool_indices[r]), :p]
                keys = torch.cat((self.k[layer][slots], k[off:off + e]))
                vals = torch.cat((self.v[layer][slots], v[off:off + e]))
                if md.custom_mask is None:
                    allowed = torch.ones(e, p + e, dtype=torch.bool)
                else:
                    allowed = md.custom_mask[int(md.mask_indptr[r]):int(md.mask_indptr[r + 1])].view(e, p + e)
                out[off:off + e] = m.attend(q[off:off + e], keys, vals, allowed)
                off += e
            h = m.mix_in(layer, h, out)
        self.forwards += 1
        self.tokens += len(ids)
        self.batches.append((len(ids), ext))
        return SimpleNamespace(logits_output=SimpleNamespace(full_logits=m.logits(h), next_token_logits=None),
                               can_run_graph=False)


def _extend_lens(fb):
    lens = getattr(fb, "extend_seq_lens_cpu", None)
    return list(lens) if lens is not None else [len(fb.input_ids) // fb.batch_size] * fb.batch_size


class DLLMMode:
    """Stands in for ForwardMode.DLLM_EXTEND where SGLang is not installed."""

    def is_dllm_extend(self):
        return True


class FakeBatch(SimpleNamespace):
    """The ForwardBatch fields the dLLM algorithms read, where SGLang is not installed."""

    def mark_forward_metadata_ready(self, replan_equivalent=False):
        self.forward_metadata_ready = True


def make_batch(ids, positions, slots, pool_idx, prefix, rids, temps, B, real: bool):
    bs = len(rids)
    fields = dict(
        batch_size=bs, input_ids=torch.tensor(ids, dtype=torch.long), req_pool_indices=torch.tensor(pool_idx),
        seq_lens=torch.tensor([p + B for p in prefix]), out_cache_loc=torch.tensor(slots, dtype=torch.long),
        seq_lens_sum=sum(prefix) + bs * B, positions=torch.tensor(positions, dtype=torch.long), rids=list(rids),
        extend_prefix_lens_cpu=list(prefix), extend_prefix_lens=torch.tensor(prefix, dtype=torch.int32),
        extend_seq_lens_cpu=[B] * bs, extend_seq_lens=torch.tensor([B] * bs, dtype=torch.int32),
        sampling_info=SimpleNamespace(temperatures=torch.tensor(temps, dtype=torch.float32)[:, None],
                                      top_ks=torch.tensor([1 if t == 0 else 1 << 30 for t in temps])))
    if real:
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        return ForwardBatch(forward_mode=ForwardMode.DLLM_EXTEND, **fields)
    return FakeBatch(forward_mode=DLLMMode(), dllm_prompt_mask=None, forward_metadata_ready=False, **fields)


class Request:
    def __init__(self, rid, prompt, max_new, pool_idx):
        self.rid, self.prompt, self.max_new, self.pool_idx = rid, list(prompt), max_new, pool_idx
        self.output, self.offset, self.block, self.state = [], 0, None, None

    @property
    def finished(self):
        return len(self.output) >= self.max_new


def serve(algo, runner: FakeRunner, requests: list, B: int, mask_id: int, temps: dict, *, real: bool,
          shuffle_seed: int | None = None, contract=None):
    """SGLang's FDFO loop in miniature (sglang.srt.dllm.mixin.scheduler.process_batch_result_dllm): every round
    one `algo.run` over the unfinished requests, in an order shuffled per round when `shuffle_seed` is given.
    Returns {rid: generated tokens}. `contract(result, batch, B)` checks each run's return value."""
    rng = random.Random(shuffle_seed)
    next_slot = 1  # slot 0 is the padding slot
    rounds = 0
    while not all(r.finished for r in requests):
        live = [r for r in requests if not r.finished]
        if shuffle_seed is not None:
            rng.shuffle(live)
        ids, positions, slots, pool, prefix = [], [], [], [], []
        for r in live:
            if r.block is None:  # a new block: the scheduler's fill ids are prompt + output + B masks
                fill = r.prompt + r.output + [mask_id] * B
                r.block = fill[r.offset:r.offset + B]
                new = torch.arange(next_slot, next_slot + B)
                next_slot += B
                runner.req_to_token[r.pool_idx, r.offset:r.offset + B] = new
            ids += r.block
            positions += list(range(r.offset, r.offset + B))
            slots += runner.req_to_token[r.pool_idx, r.offset:r.offset + B].tolist()
            pool.append(r.pool_idx)
            prefix.append(r.offset)
        fb = make_batch(ids, positions, slots, pool, prefix, [r.rid for r in live], [temps[r.rid] for r in live],
                        B, real)
        result = algo.run(runner, fb, [r.state for r in live])
        if contract is not None:
            contract(result, fb, B)
        _, next_ids, accept, states, _ = result
        for i, r in enumerate(live):
            if accept[i] == 0:
                r.block, r.state = list(next_ids[i]), states[i] if states is not None else None
                continue
            block, start = list(next_ids[i]), r.offset
            generated = block[max(0, len(r.prompt) - start):] if start + B > len(r.prompt) else []
            r.output += generated
            r.offset += B
            r.block, r.state = None, None
        rounds += 1
        if rounds > 10_000:
            raise RuntimeError("serve: no progress")
    return {r.rid: r.output[:r.max_new] for r in requests}


class WindowTarget(Target):
    """One sequence of TinyLM as a spot.Target, no cache, blocks aligned to absolute positions (as SGLang and
    diffusers' LLaDA2 pipeline align them): the reference `spot.generate(..., "standard")` decodes."""

    batch_invariant = True  # float64, every pass recomputed: nothing depends on the tree's other nodes

    def __init__(self, model: TinyLM, prompt: list, max_new: int, B: int):
        self.model, self.B = model, B
        self.vocab_size, self.mask_id, self.eos_id, self.device = model.vocab, model.mask_id, None, torch.device("cpu")
        total = -(-(len(prompt) + max_new) // B) * B
        self.x = torch.full((1, total), model.mask_id, dtype=torch.long)
        self.x[0, :len(prompt)] = torch.tensor(prompt)
        self.first = len(prompt) // B

    def start(self, prompts, max_new_tokens, block_size):
        return _WindowSession(self)


class _WindowSession(Session):
    def __init__(self, target: WindowTarget):
        self.t, self.batch, self.passes, self.blk = target, 1, 0, target.first

    @property
    def block_start(self):
        return torch.tensor([self.blk * self.t.B])

    def initial_block(self, block_size):
        s = self.blk * self.t.B
        return self.t.x[:, s:s + self.t.B].clone()

    def score(self, nodes):
        _, n, B = nodes.shape
        end = (self.blk + 1) * B
        out = []
        for j in range(n):
            ids = self.t.x[0, :end].clone()
            ids[-B:] = nodes[0, j]
            out.append(self.t.model.dense(ids, B)[-B:])
        self.passes += 1
        return torch.stack(out)[None]

    def append(self, block):
        s = self.blk * self.t.B
        self.t.x[:, s:s + self.t.B] = block
        self.blk += 1
