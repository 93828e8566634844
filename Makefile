# Two entry points for a fresh machine (see README.md):
#   make run   - set up, then run the scientist on the embedded defaults (offline, SQLite, CPU fallback)
#   make test  - set up, then run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# torch goes in first, built for the machine: the CUDA build from PyPI where `nvidia-smi` sees a
# GPU, else the CPU build (a local wheel where pip's configuration offers one, otherwise PyTorch's
# CPU index), so that a laptop or CI does not download several GB of CUDA libraries.
# Set-up takes minutes: each step says what it fetches, and the long ones show pip's own progress
# (what it downloads, with a bar on a terminal); only pip's self-upgrade is quiet.
TORCH_VERSION := 2.13.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
PIP := $(BIN)/pip install --progress-bar on
ifeq ($(HAS_GPU),yes)
TORCH_BUILD := the CUDA build with its CUDA libraries, the largest download
INSTALL_TORCH := $(PIP) torch==$(TORCH_VERSION)
else
TORCH_BUILD := the CPU build
INSTALL_TORCH := $(PIP) torch==$(TORCH_VERSION)+cpu || \
	$(PIP) torch==$(TORCH_VERSION)+cpu --index-url https://download.pytorch.org/whl/cpu
endif

$(BIN)/kscience: pyproject.toml
	@echo "kscience set-up [1/4]: a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "kscience set-up [2/4]: upgrading pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "kscience set-up [3/4]: torch $(TORCH_VERSION) ($(TORCH_BUILD))"
	$(INSTALL_TORCH)
	@echo "kscience set-up [4/4]: kscience and its extras (Jupyter, matplotlib, Ray, Optuna, the model clients, the test tools)"
	$(PIP) -e '.[all]'
	touch $@
	@echo "kscience set-up done: $(BIN)/kscience"

.PHONY: setup run test browser
setup: $(BIN)/kscience

run: setup
	$(BIN)/kscience run softmax --iterations 2

# The browser test drives Debian's Chromium (no browser download of Playwright's own): where it is
# missing, `make test` installs it with apt, system-wide. `make test BROWSER=skip` leaves the system
# alone; the browser test then skips, saying why, as it does where Chromium cannot be installed.
BROWSER ?= install
browser:
ifeq ($(BROWSER),skip)
	@echo "kscience: Chromium not installed (BROWSER=skip): the browser test will be skipped"
else
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "chromium could not be installed: the browser test will be skipped"
endif

test: setup browser
	@echo "kscience: the test suite (about 35 minutes on 2 CPU cores; the summary names each failure)"
	$(BIN)/python -m pytest -q
