# Two entry points for a fresh machine (see README.md):
#   make run   - set up, then run the scientist on the embedded defaults (offline, SQLite, CPU fallback)
#   make test  - set up, then run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# torch goes in first, built for the machine: the CUDA build from PyPI where `nvidia-smi` sees a
# GPU, else the CPU build (a local wheel where pip's configuration offers one, otherwise PyTorch's
# CPU index), so that a laptop or CI does not download several GB of CUDA libraries.
TORCH_VERSION := 2.13.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
ifeq ($(HAS_GPU),yes)
INSTALL_TORCH := $(BIN)/pip install --quiet torch==$(TORCH_VERSION)
else
INSTALL_TORCH := $(BIN)/pip install --quiet torch==$(TORCH_VERSION)+cpu || \
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)+cpu --index-url https://download.pytorch.org/whl/cpu
endif

$(BIN)/kscience: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(INSTALL_TORCH)
	$(BIN)/pip install --quiet -e '.[all]'
	touch $@

.PHONY: setup run test browser
setup: $(BIN)/kscience

run: setup
	$(BIN)/kscience run softmax --iterations 2

# The browser test drives Debian's Chromium (no browser download); it skips, saying why, where
# Chromium cannot be installed.
browser:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "chromium could not be installed: the browser test will be skipped"

test: setup browser
	$(BIN)/python -m pytest -q
