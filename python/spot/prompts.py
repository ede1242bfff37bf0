"""Held-out prompts shipped with the package, so the demo and benchmarks need no corpus on a fresh machine.

Built from the held-out split (documents the target never trained on) by `spot build prompts`: math questions up
to "Solution:", and the first lines of held-out code and documentation.
"""

from __future__ import annotations

import json
from pathlib import Path

PROMPTS_FILE = Path(__file__).parent / "assets" / "heldout_prompts.json"


def held_out_prompts(count: int | None = None) -> list[str]:
    """The first `count` shipped held-out prompts (all when None)."""
    items = json.loads(PROMPTS_FILE.read_text())
    return [p["text"] for p in items[:count]]
