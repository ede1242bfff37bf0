"""The compiled extension spot_kernels._C: loaded once, at import, unless SPOT_NO_EXTENSION=1.

Loading it registers the C++ kernels (csrc/cpu/, and csrc/cuda/ where CUDA was built) under the private ops
`spot::_<op>_cpu` / `_<op>_cuda`. `C` is the loaded module (None without it) and `HAS_C_EXTENSION` says whether it
loaded; spot_kernels/backends.py reads both, spot_kernels re-exports HAS_C_EXTENSION.
"""

import os
import warnings

import torch  # noqa: F401  (loads libtorch before the extension)

HAS_C_EXTENSION = False
C = None
if os.environ.get("SPOT_NO_EXTENSION", "") != "1":
    try:
        from . import _C as C  # noqa: F401  (loading it registers the C++ kernels)

        HAS_C_EXTENSION = True
    except ImportError as err:
        if not (isinstance(err, ModuleNotFoundError) and err.name == "spot_kernels._C"):
            # Built but unloadable (e.g. a torch ABI mismatch): say so instead of silently losing the kernels.
            warnings.warn(f"spot_kernels._C failed to load ({err}); running without its kernels", stacklevel=2)


def cpu_simd_level() -> str | None:
    """The SIMD level the C++ CPU kernels run at in this process, "default", "avx2" or "avx512" (csrc/cpu/simd.h:
    ATen's level, so ATEN_CPU_CAPABILITY pins it), or None without the extension."""
    return C.cpu_simd_level() if C is not None else None


def cpu_simd_levels() -> tuple[str, ...]:
    """The SIMD levels the C++ CPU kernels were built for (every one this build can run, whatever this CPU has)."""
    return tuple(C.CPU_SIMD_LEVELS.split(",")) if C is not None else ()
