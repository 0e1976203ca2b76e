# Set-up and the two everyday commands. `make run` and `make test` each create the virtual
# environment first when it is missing, older than pyproject.toml, or set up with another TORCH or
# EXTRAS.
#
#   make run                      # python run.py on the embedded default model
#   make run ARGS="reward=customer_service_multi grpo.max_steps=300"
#   make test                     # the fast suite (what CI runs)
#   make test-slow                # also the long end-to-end runs
#
# TORCH picks the torch build: the default is the CPU build this project is tested with; on a
# GPU machine use e.g. `make setup TORCH=torch` (pip then picks the CUDA build for your system).

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
EXTRAS ?= dev,sweeps,optuna,dashboard,ray
ARGS ?=
PYTEST_ARGS ?=
# One pytest worker per core (pytest-xdist); a file's tests stay on one worker, so its module
# fixtures (a training run shared by several tests) run once. PARALLEL= runs them in one process.
PARALLEL ?= -n auto --dist loadfile
BIN := $(VENV)/bin
# One stamp per set-up: a new TORCH or EXTRAS (e.g. the GPU set-up after `make test`) installs again.
STAMP := $(VENV)/.installed-$(shell printf '%s|%s' '$(TORCH)' '$(EXTRAS)' | cksum | cut -d' ' -f1)

.PHONY: setup run test test-slow lint sandbox-tools

setup: $(STAMP) sandbox-tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

# bubblewrap gives the code-generation sandbox its namespaces; without it the sandbox falls back
# to `unshare` or to resource limits only (and says so). Installed only where we are root.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) \
		|| echo "note: bubblewrap not installed; the code sandbox will use unshare or limits only"; }

run: setup
	$(BIN)/python run.py $(ARGS)

test: setup
	$(BIN)/python -m pytest $(PARALLEL) $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -m slow $(PARALLEL) $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
