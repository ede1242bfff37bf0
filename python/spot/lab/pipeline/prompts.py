"""Prompts cut from corpus documents: the shipped held-out prompts, and the training prompts of `collect`/`tune`.

Held-out prompts come from the held-out split (documents the target never trained on): math questions up to
"Solution:", and the first lines of held-out code and documentation. `spot build prompts` writes them
deterministically (to a working folder unless told to replace the shipped assets/heldout_prompts.json).
"""

from __future__ import annotations

import json
from pathlib import Path

MIX = (("math", 0.5), ("code", 0.4), ("docs", 0.1))
TUNE_POOL, TUNE_RESERVE = 1024, 64  # `spot build tune` takes its prompts from the end of this training-split list


def prompt_of(doc: dict, lines: int = 4) -> str | None:
    """The start of a held-out document, cut where its continuation is predictable text."""
    text = doc["text"]
    if doc["source"] == "math":
        head, sep, _ = text.partition("Solution:\n")
        return head + sep if sep else None
    kept = text.split("\n")[:lines]
    return "\n".join(kept) + "\n" if len(kept) == lines else None


def build_prompts(corpus_dir, count: int = 64, split: str = "heldout") -> list[dict]:
    """`count` prompts from `split` ("heldout" or "train"), mixed by source as MIX says."""
    docs = [json.loads(line) for line in open(Path(corpus_dir) / f"{split}.jsonl")]
    keyed = []
    for rank, ((source, _), want) in enumerate(zip(MIX, _apportion(count))):
        pool = sorted((d for d in docs if d["source"] == source), key=lambda d: d["id"])
        step = max(1, len(pool) // max(want, 1))
        picked = [p for p in (prompt_of(d) for d in pool[::step]) if p][:want]
        # Spread each source evenly over the list, so that any prefix of it is a mix.
        keyed += [(i / len(picked), rank, {"source": source, "text": p}) for i, p in enumerate(picked)]
    return [item for _, _, item in sorted(keyed, key=lambda t: t[:2])]


def _apportion(count: int) -> list[int]:
    """`count` split over MIX's sources by share, summing to `count` (largest remainders; rounding each share
    alone gave 0 of 1 and 4 of 5)."""
    exact = [count * share for _, share in MIX]
    wants = [int(x) for x in exact]
    by_remainder = sorted(range(len(MIX)), key=lambda i: (wants[i] - exact[i], i))
    for i in by_remainder[:count - sum(wants)]:
        wants[i] += 1
    return wants


def training_prompts(corpus_dir, count: int, skip=(), skip_fresh: int = 0) -> tuple[list[str], int]:
    """`count` training-split prompts for `spot build collect` and their first row number. `skip` names earlier runs by
    their count: their prompts are left out and the new rows follow theirs, so shards of several runs merge
    without repeating a prompt or a noise row. `skip_fresh` names earlier runs made with the same `skip`: the
    first `skip_fresh` fresh prompts are theirs. The last TUNE_RESERVE prompts of the pool stay for
    `spot build tune`."""
    if not skip:
        if skip_fresh:
            raise ValueError("skip_fresh counts prompts after skipped runs; name those runs in skip")
        return [p["text"] for p in build_prompts(corpus_dir, count, split="train")], 0
    seen = {p["text"] for k in skip for p in build_prompts(corpus_dir, k, split="train")}
    pool = [p["text"] for p in build_prompts(corpus_dir, TUNE_POOL, split="train")[:-TUNE_RESERVE]]
    fresh = [t for t in pool if t not in seen][skip_fresh:]
    if len(fresh) < count:
        raise ValueError(f"only {len(fresh)} training prompts are left after skipping {list(skip)} "
                         f"and {skip_fresh} more; asked {count}")
    return fresh[:count], max(skip) + skip_fresh


def write_prompts(corpus_dir, out, count: int = 64) -> int:
    """Write `count` held-out prompts of `corpus_dir` as JSON to `out`; returns how many."""
    from ...loading import atomic_write_text, check_output_path

    items = build_prompts(corpus_dir, count)
    check_output_path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(items, indent=1) + "\n")
    return len(items)
