"""A SPOT drop-in for diffusers' `LLaDA2Pipeline` (docs/integrations.md, "diffusers").

`SpotLLaDA2Pipeline` takes the pipeline's components and call signature, plus `method`, `drafter`, `budget` and
`seed`, and returns the pipeline's own tokens with fewer model calls. It reproduces the pipeline with editing off:
its commit rule (BlockRefinementScheduler: every masked position whose confidence exceeds `threshold` if they reach
the step's quota, else the quota's most confident; the quotas split `block_length` over `num_inference_steps`
steps) is `threshold:T,steps:S` of spot.rules (docs/rules.md), speculated exactly; blocks aligned to absolute
positions (the prompt's last partial block is decoded with its prompt tokens fixed), the model called on the window
up to the current block's end with the pipeline's 2D mask and position ids, and no cache. A pass scores the N nodes
of a draft tree as N copies of that window in one call (N batch rows).

Exactness: at T = 0 the tokens equal the pipeline's (greedy argmax, commit by highest probability) up to each
row's first end-of-sequence token (after it the pipeline may leave masks, this decoder fills end-of-sequence).
At T > 0 the pipeline samples with `torch.multinomial`, which draws fresh random numbers at every call, so no
speculative method can reproduce its samples; there the tokens equal SPOT's coupled-noise standard decoding
(`method="standard"`, one commit per model call, docs/noise.md) for every method, at any temperature.
"""

from __future__ import annotations

import torch

from .decode import generate
from .hf import _vocab_size
from .rules import NotACommitRule
from .target import Session, Target

try:
    from diffusers import LLaDA2Pipeline
    from diffusers.pipelines.llada2.pipeline_llada2 import LLaDA2PipelineOutput
except ImportError as e:  # pragma: no cover - the [hf] extra is part of the README's set-up
    raise ImportError("the LLaDA2Pipeline drop-in needs diffusers: pip install 'spot-kernels[hf]'") from e


class SpotLLaDA2Pipeline(LLaDA2Pipeline):
    """`LLaDA2Pipeline` whose call decodes with SPOT. `pipe.model_calls` counts the model calls of the last call.

    Every argument of `LLaDA2Pipeline.__call__` is accepted, with its defaults. Editing (`editing_threshold` > 0,
    the pipeline's default 0.5) rewrites committed tokens, which is not a commit rule: refused by name
    (`spot.rules.NotACommitRule`), pass `editing_threshold=None`; `top_p` / `top_k` filtering and callbacks are
    refused too. The rule: `threshold` (strict, float32 as the scheduler compares it) with the quotas of S =
    min(num_inference_steps, gen_length // minimal_topk, block_length) steps per block (a schedule longer than the
    block commits one position per step until the block is full, as the pipeline does); a threshold >= 1 leaves the
    quotas alone, and S = block_length is then one commit per step.
    """

    model_calls = 0

    @torch.no_grad()
    def __call__(self, prompt=None, messages=None, input_ids=None, attention_mask=None, use_chat_template=True,
                 add_generation_prompt=True, gen_length=2048, block_length=None, num_inference_steps=32,
                 temperature=0.0, top_p=None, top_k=None, sampling_method="multinomial", threshold=0.7,
                 editing_threshold=0.5, max_post_steps=16, minimal_topk=1, eos_early_stop=True, eos_token_id=None,
                 mask_token_id=None, generator=None, output_type="text", return_dict=True, callback_on_step_end=None,
                 callback_on_step_end_tensor_inputs=None, *, method: str = "spot", drafter=None, budget: int = 16,
                 seed: int = 0):
        if block_length is None:
            block_length = self.scheduler.config.block_length
        if editing_threshold is not None and editing_threshold > 0:
            raise NotACommitRule(f"SpotLLaDA2Pipeline: editing_threshold={editing_threshold} (the pipeline's default "
                                 "is 0.5) rewrites committed tokens, which is not a commit rule: SPOT verifies "
                                 "monotone commits only; pass editing_threshold=None")
        refused = {"top_p / top_k filtering": top_p is not None or top_k is not None,
                   "callbacks": callback_on_step_end is not None}
        bad = [name for name, hit in refused.items() if hit]
        if bad:
            raise ValueError(f"SpotLLaDA2Pipeline decodes exactly; refused: {', '.join(bad)}")
        self.check_inputs(prompt=prompt, messages=messages, input_ids=input_ids, gen_length=gen_length,
                          block_length=block_length, num_inference_steps=num_inference_steps,
                          minimal_topk=minimal_topk, threshold=threshold, sampling_method=sampling_method,
                          output_type=output_type, callback_on_step_end=None, callback_on_step_end_tensor_inputs=None)
        rule = _rule(threshold, num_inference_steps, gen_length, minimal_topk, block_length)
        prompt_ids, prompt_mask = self._prepare_input_ids(
            prompt=prompt, messages=messages, input_ids=input_ids, attention_mask=attention_mask,
            use_chat_template=use_chat_template, add_generation_prompt=add_generation_prompt, chat_template_kwargs=None)
        device = self._execution_device
        if prompt_ids.ndim == 1:
            prompt_ids, prompt_mask = prompt_ids[None], prompt_mask[None]
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        eos_token_id = self.eos_token_id if eos_token_id is None else eos_token_id
        mask_token_id = self.mask_token_id if mask_token_id is None else mask_token_id
        if mask_token_id is None:
            raise ValueError("`mask_token_id` must be provided (or available on the tokenizer).")

        # The pipeline's layout: the prompt, then masks up to whole blocks; 2D mask and positions over all of it.
        batch, prompt_length = prompt_ids.shape
        num_blocks = -(-(prompt_length + gen_length) // block_length)
        total = num_blocks * block_length
        x = torch.full((batch, total), mask_token_id, dtype=torch.long, device=device)
        x[:, :prompt_length] = prompt_ids
        valid = torch.zeros((batch, total), dtype=torch.long, device=device)
        valid[:, :prompt_length] = prompt_mask
        valid[:, prompt_length:prompt_length + gen_length] = 1
        first = prompt_length // block_length
        target = _WindowTarget(self.model, x, valid, first, mask_token_id)
        stop = eos_token_id if eos_early_stop and eos_token_id is not None else None
        if stop is not None and bool((x[:, first * block_length:prompt_length] == stop).any()):
            stop = None  # an end-of-sequence token inside the prompt's share of the first block is not an answer's
        out = generate(target, x[:, :prompt_length].tolist(), method, max_new_tokens=total - first * block_length,
                       block_size=block_length, temperature=temperature, seed=seed, budget=budget,
                       drafter=drafter if method == "spot" else None, eos_id=stop, allow_partial_block=True, rule=rule)
        self.model_calls = out.stats.target_passes
        self._num_timesteps = self.model_calls
        sequences = x[:, prompt_length:prompt_length + gen_length]
        texts = None
        if output_type == "text" and self.tokenizer is not None:
            cut = [_through_eos(row, eos_token_id) for row in sequences]
            texts = self.tokenizer.batch_decode(cut, skip_special_tokens=True)
        if not return_dict:
            return sequences, texts
        return LLaDA2PipelineOutput(sequences=sequences, texts=texts)


def _rule(threshold: float, steps: int, gen_length: int, minimal_topk: int, block_length: int) -> str:
    """The scheduler's commit rule as a spot.rules string (see SpotLLaDA2Pipeline)."""
    steps = min(int(steps), gen_length // max(int(minimal_topk), 1), block_length)
    if steps < 1:
        raise ValueError(f"SpotLLaDA2Pipeline: num_inference_steps={steps} leaves no step per block")
    if threshold >= 1:  # no probability exceeds it: the quotas alone
        return "one" if steps == block_length else f"steps:{steps}"
    return f"threshold:{float(threshold)!r},steps:{steps}"


def _through_eos(row: torch.Tensor, eos: int | None) -> torch.Tensor:
    hits = (row == eos).nonzero() if eos is not None else row.new_empty(0)
    return row[: int(hits[0]) + 1] if len(hits) else row


class _WindowTarget(Target):
    """The pipeline's model as a SPOT target over the pipeline's tensors (one `generate` call)."""

    def __init__(self, model, x, valid, first_block: int, mask_id: int):
        self.model, self.x, self.valid, self.first_block = model, x, valid, first_block
        self.mask_id, self.eos_id, self.device = mask_id, None, x.device
        self.vocab_size = _vocab_size(model)

    def start(self, prompts, max_new_tokens, block_size, *, backend: str = "auto") -> Session:
        return _WindowSession(self, block_size)


class _WindowSession(Session):
    """No cache: a pass calls the model on x[:, :end of the current block], N node copies as N batch rows."""

    def __init__(self, target: _WindowTarget, block_size: int):
        self.target, self.batch, self.passes = target, target.x.shape[0], 0
        self.B, self.block = block_size, target.first_block
        positions = torch.arange(target.x.shape[1], device=target.device)
        self.positions = positions.expand(self.batch, -1)

    @property
    def block_start(self) -> torch.Tensor:
        return torch.full((self.batch,), self.block * self.B, dtype=torch.long, device=self.target.device)

    def initial_block(self, block_size: int) -> torch.Tensor:
        start = self.block * self.B
        return self.target.x[:, start:start + self.B].clone()  # the prompt's tokens in it stay fixed

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        end = (self.block + 1) * B
        ids = self.target.x[:, :end].repeat_interleave(n, dim=0)
        ids[:, -B:] = nodes.reshape(b * n, B)
        out = self.target.model(ids, attention_mask=self.target.valid[:, :end].repeat_interleave(n, dim=0),
                                position_ids=self.positions[:, :end].repeat_interleave(n, dim=0))
        logits = out.logits if hasattr(out, "logits") else out[0]
        self.passes += 1
        return logits[:, -B:].reshape(b, n, B, -1)

    def append(self, block: torch.Tensor) -> None:
        start = self.block * self.B
        self.target.x[:, start:start + self.B] = block
        self.block += 1
