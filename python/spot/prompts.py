"""Held-out prompts shipped with the package, so the demo and benchmarks need no corpus on a fresh machine.

Built from the held-out split (documents the target never trained on): math questions up to "Solution:",
and the first lines of held-out code and documentation.
`python -m spot.prompts --corpus .cache/corpus` rewrites assets/heldout_prompts.json deterministically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PROMPTS_FILE = Path(__file__).parent / "assets" / "heldout_prompts.json"
MIX = (("math", 0.5), ("code", 0.4), ("docs", 0.1))
TUNE_POOL, TUNE_RESERVE = 1024, 64  # `spot tune` takes its prompts from the end of this training-split list


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
    for rank, (source, share) in enumerate(MIX):
        pool = sorted((d for d in docs if d["source"] == source), key=lambda d: d["id"])
        want = round(count * share)
        step = max(1, len(pool) // max(want, 1))
        picked = [p for p in (prompt_of(d) for d in pool[::step]) if p][:want]
        # Spread each source evenly over the list, so that any prefix of it is a mix.
        keyed += [(i / len(picked), rank, {"source": source, "text": p}) for i, p in enumerate(picked)]
    return [item for _, _, item in sorted(keyed, key=lambda t: t[:2])]


def training_prompts(corpus_dir, count: int, skip=(), skip_fresh: int = 0) -> tuple[list[str], int]:
    """`count` training-split prompts for `spot collect` and their first row number. `skip` names earlier runs by
    their count: their prompts are left out and the new rows follow theirs, so shards of several runs merge
    without repeating a prompt or a noise row. `skip_fresh` names earlier runs made with the same `skip`: the
    first `skip_fresh` fresh prompts are theirs. The last TUNE_RESERVE prompts of the pool stay for `spot tune`."""
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


def held_out_prompts(count: int | None = None) -> list[str]:
    """The first `count` shipped held-out prompts (all when None)."""
    items = json.loads(PROMPTS_FILE.read_text())
    return [p["text"] for p in items[:count]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spot.prompts", description=__doc__)
    ap.add_argument("--corpus", default=".cache/corpus")
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--out", default=str(PROMPTS_FILE))
    a = ap.parse_args(argv)
    items = build_prompts(a.corpus, a.count)
    Path(a.out).write_text(json.dumps(items, indent=1) + "\n")
    print(f"wrote {len(items)} prompts to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
