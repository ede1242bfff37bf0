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

.PHONY: install demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.h csrc/cpu/*.cpp csrc/cpu/*.h csrc/cuda/*.cu csrc/cuda/*.cuh)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(DEPS)
	$(BIN)/pip install -q --no-build-isolation -e .
	$(BIN)/pip install -q --no-deps $(SGLANG) || echo "no sglang: tests/test_sglang.py skips its SGLang tests"
	touch $@

# One screen (python/spot/demo.py): passes of standard / confidence / spot at GPU-sized trees, a commit order, CPU time
# per token, what --budget auto picks here and why, a labelled GPU projection. One thread: the 4.7M-parameter embedded
# target gains under 10% from a second core on a quiet machine, and loses 4x to 50x when another job holds that core
# (OpenMP threads wait on each other); budgets.json is tuned on one thread.
demo: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m spot demo

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests -q

bench: install
	$(BIN)/python -m spot bench --json bench-decode.json

clean:
	rm -rf $(VENV) build *.egg-info spot_kernels/_C*.so
