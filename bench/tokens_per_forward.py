"""How many tokens a target's own sampler commits per forward: `standard` under each commit rule, T 0, on the
held-out prompts of each kind (word problems, code, docs), each prompt decoded alone. What a rule gains over one
commit per pass on a target is this number; docs/model_card.md reports it per target.

Usage: python bench/tokens_per_forward.py [--target causal] [--rules threshold:0.9,threshold:0.7] [--block-sizes 32]
       [--num-prompts 8] [--max-new-tokens 128] [--sources math,code]

A block decode commits every position of its blocks, so on a target whose blocks sit at absolute positions (a
prompt's last len % B tokens open its first block) it commits the blocks' positions after the prompt, not only the
max_new_tokens it returns: committed positions are counted, over the passes they took. A target trained to end
its answer (`spot build target --layout padded`) fills the rest with <|eos|>, which rules commit in bulk, as LLaDA's
and SDAR's do on GSM8K; each cell also says what share of the returned tokens comes before the first <|eos|>."""
import argparse
import json
from collections import defaultdict

import spot
from spot.prompts import PROMPTS_FILE


def committed(target, prompt: list[int], max_new_tokens: int, block_size: int) -> int:
    head = len(prompt) % block_size if getattr(target, "aligned_blocks", False) else 0
    return -(-(max_new_tokens + head) // block_size) * block_size - head


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--rules", default="threshold:0.95;threshold:0.9;threshold:0.85;threshold:0.7",
                    help="commit rules separated by semicolons")
    ap.add_argument("--block-sizes", default="32")
    ap.add_argument("--num-prompts", type=int, default=8, help="prompts of each source")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--sources", default="math,code")
    a = ap.parse_args(argv)
    target = spot.load_target(a.target)
    eos = target.tokenizer.eos_id
    by_source = defaultdict(list)
    for item in json.loads(PROMPTS_FILE.read_text()):  # the shipped held-out prompts, with their sources
        by_source[item["source"]].append(target.tokenizer.encode(item["text"]))
    print(f"target {a.target}, T 0, {a.num_prompts} prompts of each source x {a.max_new_tokens} tokens, each alone")
    for B in (int(x) for x in a.block_sizes.split(",")):
        for rule in a.rules.split(";"):
            cells = []
            for source in a.sources.split(","):
                prompts = by_source[source][:a.num_prompts]
                positions = passes = text = 0
                for p in prompts:
                    out = spot.generate(target, [p], "standard", max_new_tokens=a.max_new_tokens, block_size=B,
                                        temperature=0.0, rule=rule, eos_id=None)
                    positions += committed(target, p, a.max_new_tokens, B)
                    passes += out.stats.target_passes
                    row = out.tokens[0]
                    text += row.index(eos) if eos in row else len(row)
                share = text / (len(prompts) * a.max_new_tokens)
                cells.append(f"{source} {positions / passes:.2f} ({positions} positions / {passes} passes, "
                             f"{share:.0%} before <|eos|>)")
            print(f"{rule}, B {B}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
