"""Forward rounds of `--dllm-algorithm Spot` against one commit per forward, on the CPU fake runner of
tests/integrations/test_sglang.py (docs/serving.md, "Measured on CPU").

  python bench/sglang_fake_runner.py [--json out.json]

The fake runner is a tiny two-layer float64 block-diffusion LM behind a paged K/V pool that honours the tree batch's
flat custom mask; the miniature FDFO scheduler is tests/sglang_fakes.serve. Both algorithms run through the same
`SpotDriver` code as `Spot.run` (no SGLang needed): "standard" is drafter "none" (the root alone, one commit per
forward). Every run's tokens are checked equal to standard's. Counts are rounds of the whole batch (what SGLang's
scheduler runs) and per-request forwards (rounds a request took part in); both include the one forward per block
that persists its final K/V and the prompt-only prefill rounds, which cost the same for every algorithm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sglang_fakes import FakeRunner, Request, TinyLM, serve  # noqa: E402

from spot.sglang.driver import SpotDriver  # noqa: E402


class Driver(SpotDriver):
    def __init__(self, block_size: int, mask_id: int, config: dict):
        self.block_size, self.mask_id, self.fdfo = block_size, mask_id, True
        self.init_spot(config)


def measure(B: int, T: float, budget: int, requests: int, max_new: int, seed: int = 0) -> dict:
    model = TinyLM(max_pos=1024)
    g = torch.Generator().manual_seed(seed)
    prompts = {f"r{i}": torch.randint(0, model.vocab - 1, (int(torch.randint(3, 3 * B, (1,), generator=g)),),
                                      generator=g).tolist() for i in range(requests)}
    out = {}
    for name, config in (("standard", {"drafter": "none", "seed": seed}),
                         ("spot", {"drafter": "confidence", "budget": budget, "seed": seed})):
        runner = FakeRunner(model, slots=1 + requests * (max_new + 4 * B), max_reqs=requests, max_len=1024)
        reqs = [Request(rid, p, max_new, i) for i, (rid, p) in enumerate(prompts.items())]
        driver = Driver(B, model.mask_id, config)
        per_request = {}
        original = driver.spot_round

        def counted(runner_, fb, states, original=original, per_request=per_request):
            for rid in fb.rids:
                per_request[rid] = per_request.get(rid, 0) + 1
            return original(runner_, fb, states)

        driver.spot_round = counted
        tokens = serve(driver, runner, reqs, B, model.mask_id, {rid: T for rid in prompts}, real=False)
        out[name] = {"tokens": tokens, "rounds": runner.forwards, "request_forwards": sum(per_request.values()),
                     "tokens_scored": runner.tokens}
    assert out["spot"]["tokens"] == out["standard"]["tokens"], "spot differs from standard"
    s, std = out["spot"], out["standard"]
    return {"B": B, "T": T, "budget": budget, "requests": requests, "max_new": max_new,
            "rounds": [s["rounds"], std["rounds"]], "round_ratio": round(s["rounds"] / std["rounds"], 3),
            "request_forwards": [s["request_forwards"], std["request_forwards"]],
            "request_forward_ratio": round(s["request_forwards"] / std["request_forwards"], 3),
            "tokens_scored": [s["tokens_scored"], std["tokens_scored"]]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [measure(B, T, budget, requests=4, max_new=64)
            for B in (8, 16, 32) for T in (0.0, 1.0) for budget in (8, 16)]
    print("| B | T | budget | batch rounds spot / standard | ratio | request forwards spot / standard | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['B']} | {r['T']:g} | {r['budget']} | {r['rounds'][0]} / {r['rounds'][1]} | {r['round_ratio']} | "
              f"{r['request_forwards'][0]} / {r['request_forwards'][1]} | {r['request_forward_ratio']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
