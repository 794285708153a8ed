# kernellab: `make` sets up and runs the main job on this machine's default target;
# `make test` runs the test suite. Every target is a thin wrapper over `invoke` (see README).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INVOKE := $(BIN)/invoke
# torch on the host is optional (native runs, `--native`); images bring their own.
HOST_TORCH ?= torch==2.13.0
TARGET ?=
TARGET_FLAG := $(if $(TARGET),--target $(TARGET),)

.PHONY: all setup engine venv image kernels bench-quick watch profile sanitize test test-all test-full test-full-images test-full-cluster test-unit test-tools lint test-podman bench-build devloop bench-transfer doctor shell devcontainer notebook render check-matrix clean

all: setup image kernels bench-quick  ## the main job: build the default image, test the kernels in it, quick bench

setup: engine venv  ## Docker engine (if missing) and the host virtualenv

engine:  ## install and start a Docker engine if none runs (needs root the first time)
	bash docker/engine.sh

venv: $(BIN)/.installed

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e ".[dev]" "$(HOST_TORCH)" numpy matplotlib
	touch $@

image: venv  ## build the default (or TARGET=...) image
	$(INVOKE) build-image $(TARGET_FLAG)

kernels: venv  ## compile the kernels in the image and check them against PyTorch
	$(INVOKE) test $(TARGET_FLAG)

bench-quick: venv  ## a quick benchmark in the image; prints the summary table
	$(INVOKE) bench --quick $(TARGET_FLAG)

watch: venv  ## rebuild and check one op on every save: make watch OP=softmax [TARGET=NAME] (Ctrl-C stops)
	$(INVOKE) watch -k "$(OP)" $(TARGET_FLAG)

profile: venv  ## Nsight Compute on one op and its baselines: make profile OP=softmax [TARGET=NAME]
	$(INVOKE) profile -k "$(OP)" $(TARGET_FLAG)

sanitize: venv  ## one op's checks under every compute-sanitizer tool: make sanitize OP=softmax [TARGET=NAME]
	$(INVOKE) sanitize -k "$(OP)" --tool all $(TARGET_FLAG)

test: venv lint test-tools  ## after a change: lint, types, unit and the integration tests on the default image (docs/testing.md)
	$(BIN)/python -m pytest -m "not full"

test-all: test test-full  ## before a release: `make test` plus the tier that builds other images from scratch

test-full: test-full-images test-full-cluster  ## only the full tier: CUDA images, no-cache rebuilds, proxy and CA builds, recipe builds, the cluster's runs

# The full tier's runs on the one-node Slurm, and its tests that build no image (the CUDA sources compiled without a
# GPU, the native watcher, the offline index): test-full-cluster runs them, test-full-images everything else.
SLURM_FULL_TESTS := tests/test_cluster_slurm.py tests/test_recipe_profile_slurm.py tests/test_kernel_sources.py \
	tests/test_watch.py tests/test_recipes_offline.py

test-full-images: venv  ## the full tier but the one-node Slurm's runs (CI runs the two halves side by side)
	$(BIN)/python -m pytest -m full $(addprefix --ignore=,$(SLURM_FULL_TESTS))

test-full-cluster: venv  ## the full tier's runs on the one-node Slurm, and its tests that build no image
	$(BIN)/python -m pytest -m full $(SLURM_FULL_TESTS)

test-unit: venv lint  ## lint, types, and the tests that need neither an engine nor a GPU
	$(BIN)/python -m pytest -m "not docker and not podman and not gpu and not slurm"

test-tools:  ## what the devcontainer/notebook tests drive: Debian's chromium (as root), the pinned Dev Containers CLI (npm)
	bash .ci/test-tools.sh

lint: venv  ## ruff and mypy (configured in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/mypy

test-podman:  ## the engine contract suite against rootless Podman (as root: makes a user for it)
	bash .ci/podman-suite.sh

bench-build: venv  ## benchmarks/build.py: cold, unchanged and kernel-edit rebuilds
	$(BIN)/python benchmarks/build.py $(if $(TARGET),--target $(TARGET),)

devloop: venv  ## benchmarks/devloop.py: the edit-rebuild-check loop (native)
	$(BIN)/python benchmarks/devloop.py

bench-transfer: venv  ## benchmarks/transfer.py: export/import vs docker save (about 8 minutes)
	$(BIN)/python benchmarks/transfer.py --repeat 3

doctor: venv
	$(INVOKE) doctor $(TARGET_FLAG)

shell: venv
	$(INVOKE) shell $(TARGET_FLAG)

devcontainer: venv  ## write .devcontainer/<target>/devcontainer.json (VS Code, devcontainers CLI)
	$(INVOKE) devcontainer $(TARGET_FLAG)

notebook: venv  ## JupyterLab in the image on 127.0.0.1 (Ctrl-C stops it)
	$(INVOKE) notebook $(TARGET_FLAG)

check-matrix: venv  ## compare docker/matrix.toml's PyTorch releases with what PyPI publishes (needs the index)
	$(INVOKE) check-matrix

render: venv  ## re-render the committed Dockerfiles after editing docker/*.toml
	$(INVOKE) render-dockerfiles

clean:
	rm -rf $(VENV) .pytest_cache
