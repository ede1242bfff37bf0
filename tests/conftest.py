import os

import pytest
import torch

# The suite runs tiny models whose ops are dominated by per-call overhead; one intra-op thread is as fast and
# does not fight a second process for the machine's two cores.
torch.set_num_threads(1)

# Without a GPU, Triton kernels run on CPU tensors in Triton's interpreter, which must be switched on before any
# kernel module is imported (spot_kernels.triton.* are imported on first use). With a GPU they compile for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# torch.compile's inductor cache under the checkout's .cache/ (git-ignored), not the machine-wide /tmp one: a cache
# that other processes write at the same time, or that another torch build left behind, crashed inductor's
# compile here (a segfault in test_the_round_compiles_with_inductor); a clean clone starts with an empty one. One
# cache per ATEN_CPU_CAPABILITY: inductor's cache key leaves it out, and a round compiled at the native level then
# loaded under `avx2` failed in its generated wrapper (`tuple args required`, then IndexError on a rerun).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), ".cache", "torchinductor", os.environ.get("ATEN_CPU_CAPABILITY") or "native"))


@pytest.fixture(scope="session")
def cuda_emulation():
    """torch.ops.spot_emu: the CUDA kernels built for the CPU SIMT emulation (tests/helpers.py)."""
    import helpers

    return helpers.build_cuda_emulation()


@pytest.fixture
def backend(request):
    """A helpers.Target for the backend named by indirect parametrization:
    @pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)."""
    import helpers

    return helpers.target(request.param, request)


def pytest_collection_modifyitems(items):
    # Triton's interpreter evaluates masked-out lanes too (inf - inf, log 0, ...) and numpy warns about them.
    for item in items:
        if getattr(item, "callspec", None) and item.callspec.params.get("backend") == "triton":
            item.add_marker(pytest.mark.filterwarnings("ignore::RuntimeWarning"))
