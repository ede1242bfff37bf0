"""What a spot.HFTarget pass costs against the bare transformers forward on the same tokens (issue 15).

    python bench/hf_overhead.py [--json hf_overhead.json] [--reps 20] [--threads 1]

Model: a random Qwen3 config of about 20M parameters (hidden 256, 8 layers, 4 query / 2 KV heads of 64, MLP 768,
vocabulary 24,576, untied head), float32, sdpa, block-causal layout, a 256-token prompt in the KV cache, B = 32.
Measured, interleaved in one run (medians of --reps):
  - bare:   model(block, past_key_values=cache) then cropping the cache back, i.e. one plain forward of B tokens;
  - spot N: one HFTarget session pass over N nodes (tree mask, position ids, N x B tokens, logits_to_keep, crop);
  - bare N x B: the bare forward of N x B tokens in one call (the cost N nodes should have);
  - N separate: N bare forwards of B tokens each (what a pass must NOT cost).
Goals: spot 1 / bare <= 1.10; spot N close to bare N x B, well below N separate for N > 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from spot.lab.bench import check_writable, write_json
from spot.hf import HFTarget, _crop

PROMPT, B, NODES = 256, 32, (1, 2, 4, 8, 16)


def build_model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=24576, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
                      tie_word_embeddings=False, attn_implementation="sdpa")
    return Qwen3ForCausalLM(cfg).eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    a = parser.parse_args()
    if a.json:
        check_writable(a.json)  # before the run, not after it
    torch.set_num_threads(a.threads)
    model = build_model()
    params = sum(p.numel() for p in model.parameters())
    mask_id = model.config.vocab_size - 1
    target = HFTarget(model, "block_causal", mask_id=mask_id, self_check=False)
    prompt = torch.randint(3, mask_id, (PROMPT,), generator=torch.Generator().manual_seed(0)).tolist()
    session = target.start([prompt], B, B)
    root = torch.full((1, 1, B), mask_id, dtype=torch.long)
    session.score(root)  # prefill: the prompt is now the cached prefix
    cache = session.cache

    @torch.no_grad()
    def bare(tokens: int):
        ids = torch.full((1, tokens), mask_id, dtype=torch.long)
        positions = torch.arange(PROMPT, PROMPT + tokens)[None]
        model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True)
        _crop(cache, PROMPT)

    def spot(n: int):
        session.score(root.expand(1, n, B))

    cases = {"bare": lambda: bare(B)}
    for n in NODES:
        cases[f"spot {n}"] = lambda n=n: spot(n)
        if n > 1:
            cases[f"bare {n}xB"] = lambda n=n: bare(n * B)
            cases[f"{n} separate"] = lambda n=n: [bare(B) for _ in range(n)]
    times = {name: [] for name in cases}
    for fn in cases.values():  # warm up
        fn()
    for _ in range(a.reps):  # interleaved, so load changes hit every case alike
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    rows = [{"nodes": n, "spot_ms": ms[f"spot {n}"],
             "bare_nxb_ms": ms["bare"] if n == 1 else ms[f"bare {n}xB"],
             "separate_ms": ms["bare"] * n if n == 1 else ms[f"{n} separate"]} for n in NODES]
    print(f"Qwen3 random, {params / 1e6:.1f}M parameters, prompt {PROMPT}, B {B}, threads {a.threads}, "
          f"medians of {a.reps}")
    print(f"bare forward of B tokens: {ms['bare']:.2f} ms; HFTarget pass over 1 node: {ms['spot 1']:.2f} ms "
          f"(ratio {ms['spot 1'] / ms['bare']:.3f})")
    print(f"{'N':>3} {'spot pass ms':>13} {'bare NxB ms':>12} {'N separate ms':>14} {'spot/bare NxB':>14} "
          f"{'spot/separate':>14}")
    for r in rows:
        print(f"{r['nodes']:>3} {r['spot_ms']:>13.2f} {r['bare_nxb_ms']:>12.2f} {r['separate_ms']:>14.2f} "
              f"{r['spot_ms'] / r['bare_nxb_ms']:>14.3f} {r['spot_ms'] / r['separate_ms']:>14.3f}")
    if a.json:
        write_json({"parameters": params, "prompt": PROMPT, "block_size": B, "threads": a.threads, "reps": a.reps,
                    "ms": ms, "rows": rows, "one_node_over_bare": ms["spot 1"] / ms["bare"]}, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
