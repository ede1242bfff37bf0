"""Model calls of diffusers' LLaDA2Pipeline and of SpotLLaDA2Pipeline (standard, confidence, spot) on the tiny
stand-in model of tests/integrations/test_drop_in.py, at the pipeline's commit rules (docs/integrations.md, section 3).

    python bench/drop_in_calls.py

Every method's tokens are checked equal to the pipeline's before its calls are printed (T = 0, editing off, eos off).
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "integrations")]

import hf_tiny  # noqa: E402
import test_drop_in  # noqa: E402

SETTINGS = {"one commit per step (threshold 1.0, 8 steps)": dict(threshold=1.0, num_inference_steps=8),
            "the pipeline's defaults, editing off (threshold 0.7, 32 steps)": dict(threshold=0.7,
                                                                                   num_inference_steps=32),
            "threshold 0.3, 4 steps (quota 2 per step)": dict(threshold=0.3, num_inference_steps=4)}


def main() -> None:
    for name, rule in SETTINGS.items():
        for prompt_length in (11, 16):
            model, (pipe, spot_pipe) = test_drop_in._pipelines(8)
            ids = torch.arange(3, 3 + prompt_length)[None].repeat(2, 1)
            ids[1] += 20
            kw = dict(input_ids=ids, gen_length=16, block_length=8, mask_token_id=hf_tiny.MASK_ID,
                      eos_token_id=hf_tiny.EOS_ID, eos_early_stop=False, output_type="seq", temperature=0.0,
                      editing_threshold=None, **rule)
            model.calls = 0
            ref = pipe(**kw).sequences.tolist()
            calls = {"pipeline": model.calls}
            for method in ("standard", "confidence", "spot"):
                model.calls = 0
                got = spot_pipe(method=method, drafter=test_drop_in._drafter(), budget=8, **kw).sequences.tolist()
                if got != ref:
                    raise SystemExit(f"{name}, prompt {prompt_length}: {method} decoded other tokens")
                calls[method] = model.calls
            print(f"{name}, prompt {prompt_length}: " + ", ".join(f"{k} {v}" for k, v in calls.items()))


if __name__ == "__main__":
    main()
