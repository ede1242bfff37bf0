"""GPU check of the SGLang plug-in (run by bench/gpu_check.sh; docs/serving.md): serve a tiny random SDAR-shaped
model with `--dllm-algorithm Spot` and with SGLang's own `LowConfidence` at one commit per step, and compare tokens
and forward rounds.

  python bench/sglang_check.py --json out.json [--budget SECONDS]

Needs SGLang with its CUDA kernel packages, a GPU, and this project installed (the entry point registers Spot).
Six engines, one after the other, the same prompts and request ids:
  1. LowConfidence, threshold 1.0 (no confidence exceeds it: its top-1 fallback commits one position per
     forward), T = 0;
  2. Spot with the confidence drafter, T = 0; and again at T = 1;
  3. Spot with drafter "none" (the root alone: one commit per forward, the project's `standard`), T = 1;
  4. LowConfidence at its default threshold 0.95, T = 0, and Spot speculating that rule (`rule: threshold:0.95`).
Claims checked: tokens(1) == tokens(2, T=0); tokens(2, T=1) == tokens(3, T=1); forwards(2) < forwards(1) and
forwards(2, T=1) < forwards(3); tokens and fewer forwards of Spot's rule against LowConfidence 0.95. Forwards are
counted by the plug-in's SPOT_SGLANG_FORWARD_LOG (one line per dLLM round of the scheduler, for any algorithm). The
model is float32 with sharpened output weights, so ties between candidates are far apart. Nothing here has run yet: no
GPU with SGLang has been lent to the project.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from spot.lab.bench import check_writable, write_json

BLOCK = 16
PROMPTS = [[151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30], list(range(1000, 1037)), [42] * 5]
MAX_NEW = 48


def build_model(directory: Path) -> None:
    """A random Qwen3-structured checkpoint declared as SDARForCausalLM (SGLang's SDAR model has Qwen3's weights:
    q/k norms, stacked qkv and gate/up projections); vocabulary 151936 so that SDAR's mask id 151669 exists."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=151936, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
                      tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)  # peaked predictions: no near-ties between candidates
    model.save_pretrained(directory, safe_serialization=True)
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = ["SDARForCausalLM"]
    (directory / "config.json").write_text(json.dumps(config, indent=1))


def serve(model_dir: Path, algorithm: str, config: dict, temperature: float, log: Path, work: Path) -> tuple:
    """Tokens per prompt and forward rounds of one engine."""
    import sglang

    yaml_path = work / f"{algorithm}-{len(list(work.iterdir()))}.yaml"
    yaml_path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in {"block_size": BLOCK, **config}.items()))
    log.write_text("")
    os.environ["SPOT_SGLANG_FORWARD_LOG"] = str(log)  # read by the plug-in in every scheduler process
    engine = sglang.Engine(model_path=str(model_dir), dllm_algorithm=algorithm, dllm_algorithm_config=str(yaml_path),
                           attention_backend="triton", disable_decode_cuda_graph=True,
                           disable_prefill_cuda_graph=True, dtype="float32", skip_tokenizer_init=True,
                           mem_fraction_static=0.25, max_running_requests=4, random_seed=0, log_level="error")
    try:
        params = [{"temperature": temperature, "max_new_tokens": MAX_NEW, "ignore_eos": True} for _ in PROMPTS]
        rids = [f"check-{i}" for i in range(len(PROMPTS))]  # fixed: the noise rows come from the request ids
        outs = engine.generate(input_ids=PROMPTS, sampling_params=params, rid=rids)
    finally:
        engine.shutdown()
    forwards = sum(1 for line in log.read_text().splitlines() if line.strip())
    return [o["output_ids"] for o in outs], forwards


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds; engines not started past it are skipped")
    args = ap.parse_args()
    if args.json:
        check_writable(args.json)  # before the run, not after it
    result = {"claims": {}, "runs": {}, "errors": []}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = work / "tiny-sdar"
        model_dir.mkdir()
        build_model(model_dir)
        runs = {"low_confidence_T0": ("LowConfidence", {"threshold": 1.0}, 0.0),
                "spot_T0": ("Spot", {"budget": 8}, 0.0),
                "spot_T1": ("Spot", {"budget": 8}, 1.0),
                "standard_T1": ("Spot", {"drafter": "none"}, 1.0),
                # SGLang's LowConfidence at its default threshold, and Spot speculating that rule
                "low_confidence_095_T0": ("LowConfidence", {"threshold": 0.95}, 0.0),
                "spot_rule_095_T0": ("Spot", {"budget": 8, "rule": "threshold:0.95"}, 0.0)}
        for name, (algorithm, config, temperature) in runs.items():
            if time.time() - t0 > args.budget:
                result["errors"].append(f"{name}: not started, budget spent")
                continue
            try:
                tokens, forwards = serve(model_dir, algorithm, config, temperature, work / "forwards.log", work)
                result["runs"][name] = {"forwards": forwards, "tokens": tokens, "seconds": round(time.time() - t0, 1)}
            except Exception as e:  # noqa: BLE001 - report and go on with the next engine
                result["errors"].append(f"{name}: {type(e).__name__}: {e}")
            print(name, json.dumps(result["runs"].get(name, {}).get("forwards")), flush=True)
    r = result["runs"]
    if "low_confidence_T0" in r and "spot_T0" in r:
        result["claims"]["tokens_equal_low_confidence_T0"] = r["spot_T0"]["tokens"] == r["low_confidence_T0"]["tokens"]
        result["claims"]["fewer_forwards_than_low_confidence_T0"] = \
            r["spot_T0"]["forwards"] < r["low_confidence_T0"]["forwards"]
        result["claims"]["forward_ratio_vs_low_confidence_T0"] = r["spot_T0"]["forwards"] / \
            max(r["low_confidence_T0"]["forwards"], 1)
    if "low_confidence_095_T0" in r and "spot_rule_095_T0" in r:
        low, spot = r["low_confidence_095_T0"], r["spot_rule_095_T0"]
        result["claims"]["tokens_equal_low_confidence_095_T0"] = spot["tokens"] == low["tokens"]
        result["claims"]["fewer_forwards_than_low_confidence_095_T0"] = spot["forwards"] < low["forwards"]
        result["claims"]["forward_ratio_vs_low_confidence_095_T0"] = spot["forwards"] / max(low["forwards"], 1)
    if "spot_T1" in r and "standard_T1" in r:
        result["claims"]["tokens_equal_standard_T1"] = r["spot_T1"]["tokens"] == r["standard_T1"]["tokens"]
        result["claims"]["fewer_forwards_than_standard_T1"] = r["spot_T1"]["forwards"] < r["standard_T1"]["forwards"]
        result["claims"]["forward_ratio_vs_standard_T1"] = r["spot_T1"]["forwards"] / \
            max(r["standard_T1"]["forwards"], 1)
    write_json(result, args.json)
    print(json.dumps(result["claims"], indent=1), *result["errors"], sep="\n")
    ok = result["claims"] and all(v is not False for v in result["claims"].values()) and not result["errors"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
