# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEPS   := torch numpy safetensors tokenizers tqdm matplotlib pytest pytest-benchmark hypothesis ninja setuptools \
          wheel ruff transformers diffusers
# SGLang's Python part for the plug-in's CPU tests (docs/serving.md): the wheel without its CUDA kernel packages, plus
# exactly what importing sglang.srt.dllm.algorithm.base and sglang.srt.managers.tp_worker needs. --no-deps, so torch
# and everything above stay as they are (`pip check` will list sglang's GPU requirements as missing: expected).
# About 30 s and 310 MB.
SGLANG := sglang==0.5.23 orjson psutil pybase64 starlette msgspec pyzmq ipython traitlets aiohttp multidict yarl \
          propcache frozenlist aiosignal aiohappyeyeballs attrs "torchvision==0.29.*" dill apache-tvm-ffi==0.1.11 \
          sentencepiece==0.2.1 compressed-tensors==0.18.0 loguru gguf openai==2.8.0 httpx httpcore distro jiter \
          sniffio partial-json-parser uvicorn click fastapi annotated-doc opentelemetry-api einops setproctitle

# transformers 4.57, the line the LLaDA, Dream, SDAR and LLaDA2 checkpoints' own code runs on, beside the venv's 5.x:
# `make test` runs the Hugging Face and family tests on both. --no-deps into a folder that PYTHONPATH puts first:
# everything else (torch, safetensors, requests, ...) comes from the venv. About 15 s and 135 MB. diffusers' LLaDA2
# pipeline needs huggingface_hub >= 1.0, which transformers 4.57 refuses: its drop-in tests run on the 5.x line only.
TF4       := .cache/tf4
TF4_PKGS  := transformers==4.57.1 "huggingface_hub<1.0" "tokenizers<0.23"
HF_TESTS  := tests/integrations/test_hf.py tests/integrations/test_families.py tests/integrations/test_drop_in.py \
             tests/integrations/test_export.py

.PHONY: install demo test bench clean

# CUDA kernels: `make install` and `make demo` compile them only where a GPU is visible (setup.py: about 11 minutes on
# 2 cores, for kernels a machine without a GPU never runs); `make test`, which CI runs (.ci/run), compiles them wherever
# nvcc and a CUDA torch are, so the CUDA code stays built while the tests run its kernels in the CPU emulation.
# SPOT_BUILD_CUDA=0 or =1 given to make overrides both.
ifneq ($(filter test,$(MAKECMDGOALS)),)
SPOT_BUILD_CUDA ?= 1
endif
export SPOT_BUILD_CUDA

# spot_kernels._C, built by `pip -q`, which prints nothing while it compiles: setup.py --cuda-plan says first, in one
# line, what is built and why; $(VENV)/.extension keeps that line, so `make test` after `make demo` rebuilds only
# when it builds something else (the CUDA kernels, on a machine without a GPU).
BUILD_EXTENSION = plan="$$($(BIN)/python setup.py --cuda-plan)"; \
	echo "make: building $$plan; pip prints nothing until it is done: about 2 min here, 7 with the CUDA kernels"; \
	$(BIN)/pip install -q --no-build-isolation -e . && echo "$$plan" > $(VENV)/.extension

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.h csrc/cpu/*.cpp csrc/cpu/*.h csrc/cuda/*.cu csrc/cuda/*.cuh)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@echo "make: installing torch and the rest into $(VENV): 6.2 GB, 2 min here"
	$(BIN)/pip install -q $(DEPS)
	@$(BUILD_EXTENSION)
	$(BIN)/pip install -q --no-deps $(SGLANG) || echo "no sglang: tests/integrations/test_sglang.py skips SGLang's tests"
	touch $@

# `make test` after a `make demo` that left the CUDA kernels out: they are built now
$(VENV)/.extension-for-test: $(VENV)/.installed
	@if [ "$$($(BIN)/python setup.py --cuda-plan)" != "$$(cat $(VENV)/.extension 2>/dev/null)" ]; then \
		$(BUILD_EXTENSION); fi
	touch $@

# One screen (python/spot/lab/demo.py): passes of standard / confidence / spot at GPU-sized trees, a commit order, CPU time
# per token, what --budget auto picks here and why, a labelled GPU projection. One thread: the 4.7M-parameter embedded
# target gains under 10% from a second core on a quiet machine, and loses 4x to 50x when another job holds that core
# (OpenMP threads wait on each other); budgets.json is tuned on one thread.
demo: install
	@echo "make: spot demo decodes one prompt with each method twice, on one thread (30 s here), then prints one screen"
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m spot demo

$(TF4)/.installed: $(VENV)/.installed
	$(BIN)/pip install -q --no-deps --upgrade --target $(TF4) $(TF4_PKGS)
	touch $@

# The numerics-sensitive tests once more at the SIMD levels of a CPU without AVX-512 (docs/half_precision.md, "SIMD
# levels"): ATEN_CPU_CAPABILITY sets the level of ATen's kernels and of the C++ CPU kernels (csrc/cpu/simd.h) for the
# process. At AVX2: the C++ CPU kernels against the reference, exactness and batch invariance of the embedded target,
# the Hugging Face self-check and exactness; at the baseline ISA, the cheapest of those. The Triton interpreter and
# the CUDA emulation run the same code at every level (SIMD_SKIP). Last, on MKL's AVX2 kernels (what an Intel CPU
# without AVX-512 runs), the projections' and the node attention's row checks and the embedded target's exactness.
SIMD_AVX2_TESTS    := tests/ops/test_score.py tests/ops/test_noise.py tests/ops/test_select_children.py \
                      tests/ops/test_expand_frontier.py tests/ops/test_order_logits.py tests/ops/test_commit_rule.py \
                      tests/runtime/test_half_precision.py tests/runtime/test_batching.py tests/runtime/test_target.py \
                      tests/runtime/test_block_prefix.py \
                      tests/runtime/test_embedded.py tests/integrations/test_hf.py
SIMD_DEFAULT_TESTS := tests/ops/test_score.py tests/ops/test_noise.py tests/ops/test_select_children.py \
                      tests/runtime/test_half_precision.py tests/integrations/test_hf.py
SIMD_SKIP          := -k "not triton and not emulation"

test: $(VENV)/.extension-for-test $(TF4)/.installed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests -q
	PYTHONPATH=$(TF4) $(BIN)/python -m pytest $(HF_TESTS) -q -p no:cacheprovider -k "not llada2_pipeline and not llada2_drop_in"
	ATEN_CPU_CAPABILITY=avx2 $(BIN)/python -m pytest $(SIMD_AVX2_TESTS) $(SIMD_SKIP) -q -p no:cacheprovider
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest $(SIMD_DEFAULT_TESTS) $(SIMD_SKIP) -q -p no:cacheprovider
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 $(BIN)/python -m pytest tests/runtime/test_target.py \
		tests/runtime/test_half_precision.py -q -p no:cacheprovider -k "linear_rows or prefix_rows or embedded"

bench: install
	$(BIN)/python -m spot bench --json bench-decode.json

clean:
	rm -rf $(VENV) $(TF4) build *.egg-info spot_kernels/_C*.so
