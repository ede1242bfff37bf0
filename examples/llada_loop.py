"""LLaDA's semi-autoregressive sampler with low-confidence remasking, one commit per step, written from the
published algorithm (Nie et al., 2025, "Large Language Diffusion Models", Algorithm 5 with steps = gen_length),
before and after its hot spot is replaced by the project's `spot_kernels.score` (docs/integrations.md).

`forward(x)` is the model: token ids [b, L] -> logits [b, L, V], bidirectional over the whole sequence (for a
transformers model: `lambda x: model(x, attention_mask=<all-visible 4D mask>).logits`, or plain `model(x).logits`
for LLaDA's own code, which attends bidirectionally by construction).

    python examples/llada_loop.py          # runs both on a tiny random Qwen3 and checks they agree
"""

from __future__ import annotations

import torch

import spot_kernels


def llada_generate(forward, prompt: torch.Tensor, *, gen_length: int, block_length: int, mask_id: int,
                   temperature: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """BEFORE: the loop as published. prompt [b, P] (no padding) -> the generated ids [b, gen_length]."""
    b, P = prompt.shape
    x = torch.cat((prompt, torch.full((b, gen_length), mask_id, dtype=torch.long, device=prompt.device)), 1)
    for start in range(P, P + gen_length, block_length):
        end = min(start + block_length, P + gen_length)
        while bool((x[:, start:end] == mask_id).any()):
            logits = forward(x)
            logits[..., mask_id] = float("-inf")  # never "commit" the mask token
            # Gumbel-max sampling: LLaDA adds noise in float64 as exp(logits) / (-log u) ** T
            if temperature > 0:
                u = torch.rand(logits.shape, dtype=torch.float64, device=x.device, generator=generator)
                noisy = logits.double().exp() / (-torch.log(u)) ** temperature
            else:
                noisy = logits
            x0 = noisy.argmax(-1)  # [b, L]
            # low-confidence remasking: commit the masked position of the block whose token is most probable
            p = torch.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
            p[:, :start] = -1.0
            p[:, end:] = -1.0
            p = torch.where(x == mask_id, p, -1.0)
            pos = p.argmax(-1)
            rows = torch.arange(b, device=x.device)
            todo = (x[:, start:end] == mask_id).any(1)  # rows whose block is finished keep their tokens
            x[rows[todo], pos[todo]] = x0[rows[todo], pos[todo]]
    return x[:, P:]


def llada_generate_with_ops(forward, prompt: torch.Tensor, *, gen_length: int, block_length: int, mask_id: int,
                            temperature: float = 0.0, seed: int = 0) -> torch.Tensor:
    """AFTER: the same loop, its noise + confidence + argmax + position choice one `spot_kernels.score` call.

    The noise is the project's coupled noise of (seed, row, absolute position, commit step) (docs/noise.md), so
    at any temperature the tokens equal `spot.generate(HFTarget(model, "bidirectional"), ..., "standard")` with
    the same seed, and every SPOT method's; at T = 0 they equal `llada_generate`'s."""
    b, P = prompt.shape
    x = torch.cat((prompt, torch.full((b, gen_length), mask_id, dtype=torch.long, device=prompt.device)), 1)
    rows = torch.arange(b, device=x.device)
    for start in range(P, P + gen_length, block_length):
        end = min(start + block_length, P + gen_length)
        step = torch.zeros(b, dtype=torch.long, device=x.device)  # commits so far in each row's block
        while bool((x[:, start:end] == mask_id).any()):
            logits = forward(x)[:, start:end]
            logits[..., mask_id] = float("-inf")
            masked = x[:, start:end] == mask_id
            block_start = torch.full((b, 1), start, dtype=torch.long, device=x.device)  # absolute position
            out = spot_kernels.score(logits[:, None], masked[:, None], seed, rows[:, None], block_start,
                                     step[:, None], temperature, confidence="prob")
            pos = out.commit_pos[:, 0]  # -1 where the row's block is finished
            todo = pos >= 0
            r = rows[todo]
            x[r, start + pos[todo]] = out.tokens[r, 0, pos[todo]]
            step += todo.long()
    return x[:, P:]


def _demo() -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, attn_implementation="sdpa")
    model = Qwen3ForCausalLM(cfg).double().eval()

    @torch.no_grad()
    def forward(x):
        visible = torch.ones(x.shape[0], 1, x.shape[1], x.shape[1], dtype=torch.bool)
        return model(x, attention_mask=visible).logits

    prompt = torch.tensor([[5, 9, 14, 20]])
    before = llada_generate(forward, prompt, gen_length=16, block_length=8, mask_id=95)
    after = llada_generate_with_ops(forward, prompt, gen_length=16, block_length=8, mask_id=95)
    print("before:", before.tolist(), "\nafter: ", after.tolist(), "\nequal:", torch.equal(before, after))


if __name__ == "__main__":
    _demo()
