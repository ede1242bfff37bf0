"""`spot build collect`: trajectories of the target's standard decoding, the order drafter's training data
(docs/design.md §2.4).

For every pass of a standard run (state s_k of a block, k commits made) we keep what the drafter will later see
as stale features: per block position the top-K probabilities and ids, the sampled token, its confidence and the
masked flag; and the order in which the target committed the block. Standard decoding visits exactly the states
SPOT accepts, so (features of s_k, state s_{k+1+d}) -> position committed at s_{k+1+d} is the drafter's task at
tree depth d, and these trajectories are its exact training distribution.

One shard per (block size, temperature) and run: `traj-B{B}-T{T}.safetensors`, `traj-B{B}-T{T}-{rule}` with a
commit rule other than one (`spot.rules.rule_file_name`: its canonical form, threshold_0.9_steps_32), and `-r{R}`
after it for a run whose prompts are numbered from R (a later run on further prompts; training merges a pair's
shards). T is spelled `:g` where that spells it exactly (0, 1, 0.7), else in full (0.7000001): two rules or
temperatures never share a name. A run refuses, before it decodes or writes anything, to write one path twice or
to replace a shard that is already there (another run's) unless told to (`overwrite`, `--overwrite`). Safetensors
with
  topk_probs float16 [blocks, B steps, B, K], topk_ids int16 [blocks, B, B, K] (int32 for vocabularies past 32768
  tokens), tokens int16 (or int32) [blocks, B, B], confidence float32 [blocks, B, B], masked bool [blocks, B, B],
  order int32 [blocks, B] (positions in commit order; int8 in shards of blocks up to 64 written before), steps int32
  [blocks] and step_of int32 [blocks, B] (the passes of each block and the step that committed each position: with a
  commit rule, `spot build collect --rule`, a block takes fewer than B steps, each committing a set; its passes are
  padded to B with steps holding no masked position; absent in shards written before, where every step commits one
  position), prompt int32 [blocks] (index of the prompt = its noise row), block_index int32 [blocks], block_start
  int64 [blocks] (absolute position of the block's first token: with the seed in the metadata, the coordinates of
  the coupled noise, docs/design.md §2.3).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from ...decode import _check_args, generate, resolve_rule
from ...loading import atomic_write
from ...rules import canonical_rule, rule_file_name
from ...settings import Batching, TreeSettings


# The commit order's positions: int32 holds any block the decoder accepts (int8 wrapped positions >= 128 to negative
# numbers). Shards written with int8 load the same (`Trajectories` reads the order as int64).
ORDER_DTYPE = torch.int32


class TrajectoryRecorder:
    """An `on_pass` hook for `spot.generate(method="standard")` that stores every pass's stale features, row by
    row: each (prompt, block) keeps its passes in order, so rows may advance at their own pace (a commit rule's
    steps differ from row to row)."""

    def __init__(self, batch: int, block_size: int):
        self.batch, self.B = batch, block_size
        self.passes: dict[tuple[int, int], list] = {}  # (prompt in the batch, block) -> its passes' features
        self.starts: dict[tuple[int, int], torch.Tensor] = {}

    def __call__(self, block_index, step, stale):
        rows = stale.sequence if stale.sequence is not None else torch.arange(len(step))
        open_ = stale.masked.any(1).tolist()  # a row riding along with a complete block (lock-step) took no step
        for i, (prompt, blk, k) in enumerate(zip(rows.tolist(), block_index.tolist(), step.tolist())):
            if not open_[i]:
                continue
            passes = self.passes.setdefault((prompt, blk), [])
            if k != len(passes):
                raise RuntimeError(f"trajectories: prompt {prompt} block {blk} at step {k} after {len(passes)} passes")
            passes.append({name: getattr(stale, name)[i] for name in STALE})
            self.starts[(prompt, blk)] = stale.block_start[i]

    def tensors(self, orders: torch.Tensor, first_prompt: int, vocab_size: int) -> dict[str, torch.Tensor]:
        """Stack complete blocks: [batch * blocks, B steps, B, ...], a block's passes padded to B steps (a commit
        rule takes fewer: `steps` per block; padding steps hold no masked position). Token ids are int16 when the
        vocabulary fits, else int32 (a 151,936-token Qwen vocabulary). `step_of` [blocks, B]: the step that
        committed each position (one commit per step: its place in `order`)."""
        ids = torch.int16 if vocab_size <= 2**15 else torch.int32
        n_blocks = orders.shape[1]
        keys = [(p, blk) for p in range(self.batch) for blk in range(n_blocks)
                if (p, blk) in self.passes and bool((orders[p, blk] >= 0).all())]
        pad = {"topk_probs": 0.0, "topk_ids": -1, "tokens": -1, "confidence": float("nan"), "masked": False}

        def stack(name, dtype):
            out = []
            for key in keys:
                x = torch.stack([row[name] for row in self.passes[key]])  # [steps, B, ...]
                if len(x) < self.B:
                    x = torch.cat((x, x.new_full((self.B - len(x),) + tuple(x.shape[1:]), pad[name])))
                out.append(x)
            return torch.stack(out).to(dtype).cpu()

        masked = stack("masked", torch.bool)
        return {
            "topk_probs": stack("topk_probs", torch.float16),
            "topk_ids": stack("topk_ids", ids),
            "tokens": stack("tokens", ids),
            "confidence": stack("confidence", torch.float32),
            "masked": masked,
            "order": torch.stack([orders[p, blk] for p, blk in keys]).to(ORDER_DTYPE).cpu(),
            "steps": torch.tensor([len(self.passes[key]) for key in keys], dtype=torch.int32),
            "step_of": (masked.sum(1) - 1).to(torch.int32),  # passes a position stayed masked in, minus one
            "prompt": torch.tensor([first_prompt + p for p, _ in keys], dtype=torch.int32),
            "block_index": torch.tensor([blk for _, blk in keys], dtype=torch.int32),
            "block_start": torch.stack([self.starts[key] for key in keys]).to(torch.int64).cpu(),
        }


# The stale features a trajectory keeps of each pass.
STALE = ("topk_probs", "topk_ids", "tokens", "confidence", "masked")


def pair_name(path) -> str:
    """traj-B{B}-T{T} of a shard file traj-B{B}-T{T}[-r{R}].safetensors: the runs of one pair share it."""
    return re.sub(r"-r\d+$", "", Path(path).stem)


def temperature_name(T: float) -> str:
    """T as a shard name spells it: `:g` where that is T exactly (the names written before: 0, 1, 0.7), else Python's
    shortest round-trip spelling (0.7000001 and 0.7000002 are two names, where `:g` made both 0.7)."""
    short = f"{T:g}"
    return short if float(short) == T else repr(float(T))


def shard_paths(out_dir, block_sizes, temperatures, rule: str = "one", first_row: int = 0,
                overwrite: bool = False) -> dict[tuple, Path]:
    """{(block size, temperature): its shard's path} of one collect run, refused (ValueError naming the path) when
    two pairs would write one path (a pair given twice: 1 and 1.0) or, unless `overwrite`, when a shard is already
    there: what another run wrote is never replaced by accident."""
    out_dir = Path(out_dir)
    tag = "" if rule != "family" and canonical_rule(rule) == "one" else "-" + rule_file_name(rule)
    paths: dict[tuple, Path] = {}
    for B in block_sizes:
        for T in temperatures:
            path = out_dir / (f"traj-B{B}-T{temperature_name(T)}{tag}" + (f"-r{first_row}" if first_row else "")
                              + ".safetensors")
            twice = [pair for pair, other in paths.items() if other == path]
            if twice:
                raise ValueError(f"block_sizes, temperatures: (B {twice[0][0]}, T {twice[0][1]!r}) and (B {B}, "
                                 f"T {T!r}) would both write {path.name}; give each block size and temperature once")
            if not overwrite and os.path.lexists(path):
                raise ValueError(f"{path}: a shard is already there (another run's); choose another output folder, "
                                 "or pass --overwrite (overwrite=True) to replace it")
            paths[(B, T)] = path
    return paths


def check_collect_args(target, prompts, block_sizes, temperatures, max_new_tokens, batch_size, seed, top_k,
                       first_row, rule: str = "one") -> None:
    """`collect`'s arguments, refused (naming the argument) before anything is created or decoded."""
    if not prompts:
        raise ValueError("prompts: nothing to collect (no prompts)")
    if not block_sizes or not temperatures:
        raise ValueError(f"block_sizes, temperatures: expected at least one each, got {list(block_sizes)}, "
                         f"{list(temperatures)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
    if isinstance(first_row, bool) or not isinstance(first_row, int) or first_row < 0:
        raise ValueError(f"first_row: expected an int >= 0, got {first_row!r}")
    for B in block_sizes:
        resolve_rule(rule, target, "standard", B, "prob")
        for T in temperatures:
            _check_args(target, prompts, "standard", max_new_tokens=max_new_tokens, block_size=B, temperature=T,
                        seed=seed, tree=TreeSettings(budget=1, width=1, branch=1), batching=Batching(), drafter=None,
                        confidence="prob", top_k=top_k, eos_id=None,
                        rows=list(range(first_row, first_row + len(prompts))))


def collect(target, prompts: list[list[int]], out_dir, *, block_sizes=(16, 32), temperatures=(0.0, 1.0),
            max_new_tokens: int = 256, batch_size: int = 16, seed: int = 0, top_k: int = 32, first_row: int = 0,
            progress: bool = True, rule: str = "one", overwrite: bool = False) -> list[Path]:
    """Run standard decoding for every (block size, temperature) and write one shard each. Deterministic.
    Prompt i is numbered (and draws the noise of row) first_row + i. `rule`: the commit rule standard follows
    (docs/rules.md; its steps are the trajectory's; the shard's metadata names it in its canonical form). Every
    argument and every shard path (`shard_paths`: none written twice, none already there unless `overwrite`) is
    checked before the output folder is created; each shard is written to a temporary file and moved into place."""
    out_dir = Path(out_dir)
    check_collect_args(target, prompts, block_sizes, temperatures, max_new_tokens, batch_size, seed, top_k, first_row,
                       rule)
    planned = shard_paths(out_dir, block_sizes, temperatures, rule, first_row, overwrite)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for B in block_sizes:
        for T in temperatures:
            path = planned[(B, T)]
            parts = []
            bar = tqdm(total=len(prompts), desc=f"collect B={B} T={temperature_name(T)}", disable=not progress,
                       unit="prompt")
            for start in range(0, len(prompts), batch_size):
                batch = prompts[start:start + batch_size]
                rec = TrajectoryRecorder(len(batch), B)
                # rows = prompt index: the noise is that of the prompt wherever it is decoded
                out = generate(target, batch, "standard", max_new_tokens=max_new_tokens, block_size=B,
                               temperature=T, seed=seed, eos_id=None, top_k=top_k, on_pass=rec, rule=rule,
                               rows=list(range(first_row + start, first_row + start + len(batch))))
                parts.append(rec.tensors(out.orders, first_row + start, target.vocab_size))
                bar.update(len(batch))
            bar.close()
            shard = {k: torch.cat([p[k] for p in parts]).contiguous() for k in parts[0]}
            meta = {"block_size": str(B), "temperature": temperature_name(T), "seed": str(seed),
                    "first_row": str(first_row), "max_new_tokens": str(max_new_tokens),
                    "num_prompts": str(len(prompts)), "rule": rule if rule == "family" else canonical_rule(rule)}
            atomic_write(path, lambda tmp, shard=shard, meta=meta: save_file(shard, tmp, metadata=meta))
            paths.append(path)
    return paths
