# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEPS   := torch numpy safetensors tokenizers tqdm matplotlib pytest pytest-benchmark hypothesis ninja setuptools \
          wheel ruff transformers diffusers

.PHONY: install demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.h csrc/cpu/*.cpp csrc/cpu/*.h csrc/cuda/*.cu csrc/cuda/*.cuh)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(DEPS)
	$(BIN)/pip install -q --no-build-isolation -e .
	touch $@

demo: install
	$(BIN)/python -m spot generate --methods standard,confidence,spot --max-new-tokens 96 --block-size 32 --budget auto

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests -q

bench: install
	$(BIN)/python -m spot bench --json bench-decode.json

clean:
	rm -rf $(VENV) build *.egg-info spot_kernels/_C*.so
