"""SPOT as an SGLang dLLM algorithm: `--dllm-algorithm Spot` (docs/serving.md).

SGLang 0.5.23 finds dLLM algorithms only inside its own package (`sglang.srt.dllm.algorithm.algo_name_to_cls`,
filled by scanning that package), but it runs every function registered in the `sglang.srt.plugins` entry-point
group at the start of the engine, the launcher and every scheduler process (`sglang.srt.plugins.load_plugins`),
then applies the hooks those functions registered. This project's entry point is `register` below: an AROUND hook
on `sglang.srt.dllm.algorithm.get_algorithm_cls` that answers "Spot" with `spot.sglang.algorithm.Spot` and passes
every other name through. Because it runs in each process from the installed package's metadata, a spawned
scheduler sees it too (a patch made only in the parent process would not be).

Importing this package does not import SGLang; `layout` and `rounds` are pure torch and tested without it.
"""

ALGORITHM_NAME = "Spot"
HOOK_TARGET = "sglang.srt.dllm.algorithm.get_algorithm_cls"


def register() -> None:
    """The `sglang.srt.plugins` entry point: make `--dllm-algorithm Spot` resolve in this process."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(HOOK_TARGET, _get_algorithm_cls, HookType.AROUND)


def _get_algorithm_cls(original, name, *args, **kwargs):
    if name == ALGORITHM_NAME:
        from .algorithm import Spot

        return Spot
    return original(name, *args, **kwargs)
