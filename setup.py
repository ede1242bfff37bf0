"""Build the `spot_kernels._C` extension: op schemas (csrc/*.cpp), CPU kernels (csrc/cpu/*.cpp), plus CUDA kernels
(csrc/cuda/*.cu) when possible.

CUDA is built when nvcc is found, torch is a CUDA build and a GPU is visible (or SPOT_BUILD_CUDA=1); otherwise a
CPU-only extension is built: compiling every CUDA kernel takes minutes (README.md, "Before you start"), for a
machine that can never run them. Environment switches:
    SPOT_BUILD_CUDA=1          build CUDA wherever nvcc and a CUDA torch are, GPU or not (`make test` and CI do, so
                               the CUDA code stays compiled; the tests emulate its kernels on the CPU)
    SPOT_BUILD_CUDA=0          build the CPU-only extension even where CUDA is available
    SPOT_CUDA_ARCH_LIST="9.0"  GPU architectures (default "8.0;9.0"; copied to TORCH_CUDA_ARCH_LIST)
    MAX_JOBS=4                 parallel compile jobs (default 2)
    CUDA_HOME=/path            toolkit folder (default: the folder of the real nvcc, wrappers resolved)
Install for development with `pip install --no-build-isolation -e .` (torch comes from the environment).
`python setup.py --cuda-plan` prints, in one line, what the build will do and why, and builds nothing (the Makefile
shows it before the build, which `pip -q` keeps silent).
"""

import glob
import os
import re
import shutil
import sys
import warnings

from setuptools import find_namespace_packages, find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
# setuptools' editable build warns, in a box in the middle of `make install`, that a folder named like the package in
# the working directory may take precedence at import: here that folder (spot_kernels/) is the package itself.
warnings.filterwarnings("ignore", message="Editable installation")


def _toolkit_from_nvcc(nvcc: str) -> str | None:
    """The CUDA toolkit folder behind an nvcc on PATH, following symlinks and `exec` wrapper scripts.

    torch.utils.cpp_extension guesses CUDA_HOME as the parent of nvcc's folder, which is wrong when nvcc is a
    symlink or wrapper in /usr/local/bin: the headers and libraries live in the toolkit folder, not /usr/local.
    """
    for _ in range(4):  # a wrapper may point at another wrapper; stop at a sane depth
        nvcc = os.path.realpath(nvcc)
        with open(nvcc, "rb") as f:
            head = f.read(4096)
        if not head.startswith(b"#!"):
            break  # a real binary
        match = re.search(rb"exec\s+[\"']?(/\S+?/nvcc)\b", head)
        if match is None:
            break
        nvcc = match.group(1).decode()
    home = os.path.dirname(os.path.dirname(nvcc))
    return home if os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")) else None


def _gpu_visible(torch) -> bool:
    """Whether this machine shows torch a CUDA device (False, without a warning, where no driver is installed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Found no NVIDIA driver": the answer, not a problem
        return torch.cuda.is_available()


def _cuda_plan() -> tuple[bool, str]:
    """(build CUDA?, why) — decided before torch.utils.cpp_extension is imported, as it reads CUDA_HOME then."""
    switch = os.environ.get("SPOT_BUILD_CUDA", "")
    if switch == "0":
        return False, "SPOT_BUILD_CUDA=0"
    import torch

    if not torch.version.cuda:
        return False, f"torch {torch.__version__} is not a CUDA build"
    if switch != "1" and not _gpu_visible(torch):
        return False, "no GPU visible, so not the CUDA kernels it could not run; SPOT_BUILD_CUDA=1 builds them too"
    nvcc = shutil.which("nvcc")
    if not os.environ.get("CUDA_HOME"):
        home = _toolkit_from_nvcc(nvcc) if nvcc else None
        if home is None and os.path.isfile("/usr/local/cuda/include/cuda_runtime.h"):
            home = "/usr/local/cuda"
        if home is None:
            return False, "nvcc not found (set CUDA_HOME or put nvcc on PATH)"
        os.environ["CUDA_HOME"] = home
    home = os.environ["CUDA_HOME"]
    if not os.path.isfile(os.path.join(home, "bin", "nvcc")):
        return False, f"no nvcc under CUDA_HOME={home}"
    return True, f"CUDA_HOME={home}, arch list {os.environ.get('SPOT_CUDA_ARCH_LIST', '8.0;9.0')}"


def _extension():
    build_cuda, why = _cuda_plan()
    os.environ.setdefault("MAX_JOBS", "2")  # two cores here; nvcc jobs are memory hungry
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    # csrc/cpu/*.cpp: the CPU kernels (backend="cpu"), built in every configuration. OpenMP because at::parallel_for
    # is a header template: without -fopenmp its `#pragma omp parallel` is ignored and the kernels run on one thread.
    # No -march: the extension must run on any x86-64 / aarch64 CPU, so vectorisation is what the baseline ISA allows.
    sources = sorted(glob.glob("csrc/*.cpp")) + sorted(glob.glob("csrc/cpu/*.cpp"))
    cxx = ["-O3"]
    link = []
    if sys.platform.startswith("linux"):
        cxx.append("-fopenmp")
        link.append("-fopenmp")
    if build_cuda:
        os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("SPOT_CUDA_ARCH_LIST", "8.0;9.0")
        cuda_sources = sorted(glob.glob("csrc/cuda/*.cu"))
        ext = CUDAExtension(
            "spot_kernels._C",
            sources + cuda_sources,
            define_macros=[("SPOT_WITH_CUDA", "1")],
            extra_compile_args={"cxx": cxx, "nvcc": ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]},
            extra_link_args=link,
        )
        print(f"spot-kernels: building spot_kernels._C WITH CUDA ({len(cuda_sources)} .cu files; {why})")
    else:
        ext = CppExtension("spot_kernels._C", sources, extra_compile_args={"cxx": cxx}, extra_link_args=link)
        print(f"spot-kernels: building spot_kernels._C WITHOUT CUDA ({why})")
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


if __name__ == "__main__" and sys.argv[1:] == ["--cuda-plan"]:
    build_cuda, why = _cuda_plan()
    print(f"spot_kernels._C: {'C++ and CUDA kernels' if build_cuda else 'C++ CPU kernels only'} ({why})")
    sys.exit(0)
ext_modules, cmdclass = _extension()
setup(
    packages=find_packages(include=["spot_kernels", "spot_kernels.*"])
    # namespace discovery: the data folders (spot.weights, spot.assets, ...) are packages too, as setuptools sees
    # any importable folder; listing them keeps their package_data from depending on a deprecated fallback
    + find_namespace_packages(where="python", include=["spot", "spot.*"], exclude=["*.__pycache__"]),
    package_dir={"spot_kernels": "spot_kernels", "spot": "python/spot"},
    package_data={"spot": ["weights/*", "weights/*/*", "assets/*", "lab/pipeline/*.toml"]},
    include_package_data=True,
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)
