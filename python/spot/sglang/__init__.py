"""SPOT as an SGLang dLLM algorithm: `--dllm-algorithm Spot` (docs/serving.md).

SGLang 0.5.23 finds dLLM algorithms only inside its own package (`sglang.srt.dllm.algorithm.algo_name_to_cls`,
filled by scanning that package), but it runs every function registered in the `sglang.srt.plugins` entry-point
group at the start of the engine, the launcher and every scheduler process (`sglang.srt.plugins.load_plugins`),
then applies the hooks those functions registered. This project's entry point is `register` below: an AROUND hook
on `sglang.srt.dllm.algorithm.get_algorithm_cls` that answers "Spot" with `spot.sglang.algorithm.Spot` and passes
every other name through. Because it runs in each process from the installed package's metadata, a spawned
scheduler sees it too (a patch made only in the parent process would not be).

With `SPOT_SGLANG_FORWARD_LOG=FILE` in the environment, the plug-in also appends one line per dLLM forward
round of each scheduler (the algorithm's class name and the batch size) to FILE, for any algorithm: how
bench/sglang_check.py counts forwards of `Spot` and of SGLang's own `LowConfidence` alike.

Importing this package does not import SGLang; `layout`, `rounds` and `driver` are pure torch, tested without it.
"""

import os

ALGORITHM_NAME = "Spot"
HOOK_TARGET = "sglang.srt.dllm.algorithm.get_algorithm_cls"
FORWARD_LOG_TARGET = "sglang.srt.managers.tp_worker.TpModelWorker._forward_batch_generation_dllm"


def register() -> None:
    """The `sglang.srt.plugins` entry point: make `--dllm-algorithm Spot` resolve in this process."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(HOOK_TARGET, _get_algorithm_cls, HookType.AROUND)
    if os.environ.get("SPOT_SGLANG_FORWARD_LOG"):
        HookRegistry.register(FORWARD_LOG_TARGET, _log_forward, HookType.AROUND)


def _get_algorithm_cls(original, name, *args, **kwargs):
    if name == ALGORITHM_NAME:
        from .algorithm import Spot

        return Spot
    return original(name, *args, **kwargs)


def _log_forward(original, worker, forward_batch, *args, **kwargs):
    path = os.environ.get("SPOT_SGLANG_FORWARD_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{type(worker.dllm_algorithm).__name__} {forward_batch.batch_size}\n")
    return original(worker, forward_batch, *args, **kwargs)
