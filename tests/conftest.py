"""Shared test setup: markers that skip with a reason, or fail when the environment requires them.

- `docker` tests need a Docker engine. KERNELLAB_REQUIRE_DOCKER=1 (CI sets it) makes a missing
  engine a failure instead of a skip: CI never passes by skipping.
- `podman` tests need rootless Podman (a non-root user with /etc/subuid entries).
  KERNELLAB_REQUIRE_PODMAN=1 (`.ci/podman-suite.sh` sets it) makes a missing one a failure.
- `gpu` tests need a CUDA GPU visible to PyTorch. KERNELLAB_REQUIRE_GPU=1 (the GPU machine) makes
  a missing GPU a failure.
- `full` tests build images other than the default one from scratch (CUDA images, no-cache rebuilds, proxy and
  CA builds, recipe builds): `make test-all` runs them, `make test` does not (docs/testing.md).
(One file for every test module: the lead merges additions here.)
"""
from __future__ import annotations

import functools
import io
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# A suite started in the background by a non-interactive shell (`bash .ci/run &`, nohup) inherits SIGINT ignored,
# and so would every program a test starts: Ctrl-C tests (they send SIGINT as a terminal would) would then test
# nothing. Handling it here makes the programs the tests start get the default again (exec resets a handled signal,
# never an ignored one).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@functools.lru_cache(maxsize=1)
def docker_problem() -> str | None:
    from kernellab import engine
    docker = engine.by_name("docker")
    return None if docker.answers() else f"needs a running Docker engine: {docker.problem()}"


@functools.lru_cache(maxsize=1)
def podman_problem() -> str | None:
    from kernellab import engine
    if os.geteuid() == 0:
        return ("kernellab drives Podman rootless; run as a non-root user with /etc/subuid entries "
                "(`sudo bash .ci/podman-suite.sh` does)")
    podman = engine.by_name("podman")
    return None if podman.answers() else podman.problem()


@functools.lru_cache(maxsize=1)
def gpu_problem() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed; `make setup` installs it"
    if not torch.cuda.is_available():
        return f"no CUDA GPU visible to PyTorch {torch.__version__}; run on a GPU machine (or in `invoke test`)"
    return None


@functools.lru_cache(maxsize=1)
def nsys_problem() -> str | None:
    from kernellab.nsight import nsys, tools
    found = tools.find("nsys")
    if found is None:
        return "needs Nsight Systems (`sudo make test-tools` unpacks Debian's under /opt/nvidia/nsight-systems)"
    return nsys.importer_works(found)


def _require(marker: str, problem: str | None, variable: str) -> None:
    if problem is None:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{variable}=1 but this {marker} test {problem}", pytrace=False)
    pytest.skip(problem)


#: Tests (by their full names) that belong to the full tier though their modules do not: the engine contract's export
#: round trip through Docker (about 70 s; its Podman variant runs in make test-podman); the CUDA sources compiled
#: without a GPU but vector_add's (about 60 s at once on a slow 2-core machine; the full tier's cu124-debian compiles
#: every CUDA op too); watch in the cpu container (35 s) and the native watcher's rebuilds (42 s; the watcher's other
#: tests stay); three of the recipe builds' cache tests (about 40 s; the demo recipe's end-to-end run and the run's
#: record stay) and the offline index's fail-fast build (18 s). docs/testing.md says when each moved.
FULL_VARIANTS = {"test_an_exported_bundle_imports_back_as_the_same_image[docker]",
                 *(f"test_every_cuda_source_compiles_without_a_gpu[{op}]"
                   for op in ("matmul", "attention", "layernorm", "rmsnorm", "softmax")),
                 "test_watch_in_the_cpu_container_sees_host_edits_and_ctrl_c_removes_it",
                 "test_the_watcher_rebuilds_and_rechecks_on_every_save",
                 "test_an_appended_step_reruns_none_before_it_and_the_name_tag_follows_a_revert",
                 "test_a_failing_step_is_named_with_its_log_and_the_next_build_resumes_there",
                 "test_a_run_of_an_image_another_cache_built_records_what_the_image_was_made_of",
                 "test_a_recipe_build_says_at_once_that_the_index_does_not_answer_and_fails_fast"}


@pytest.hookimpl(tryfirst=True)   # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.name in FULL_VARIANTS:
            item.add_marker(pytest.mark.full)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is not None:
        _require("docker", docker_problem(), "KERNELLAB_REQUIRE_DOCKER")
    if item.get_closest_marker("podman") is not None:
        _require("podman", podman_problem(), "KERNELLAB_REQUIRE_PODMAN")
    if item.get_closest_marker("gpu") is not None:
        _require("gpu", gpu_problem(), "KERNELLAB_REQUIRE_GPU")
    if item.get_closest_marker("nsys") is not None:
        _require("nsys", nsys_problem(), "KERNELLAB_REQUIRE_NSYS")


@pytest.fixture(scope="session")
def docker_client():
    """A docker SDK client connected to a running engine (skips, or fails in CI, without one)."""
    _require("docker", docker_problem(), "KERNELLAB_REQUIRE_DOCKER")
    import docker
    client = docker.from_env(timeout=300)
    yield client
    client.close()


def committed_locks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lock folder holding copies of the committed locks: a build that follows them installs what `make` did
    (so BuildKit's cache serves it in seconds) and never writes docker/locks."""
    folder = tmp_path_factory.mktemp("locks")
    for lock in (ROOT / "docker" / "locks").glob("*.json"):
        shutil.copy(lock, folder / lock.name)
    return folder


@pytest.fixture
def paper(tmp_path, monkeypatch):
    """A mirror with a paper repo and its submodule (tests/recipe_fixtures.py); git reaches it as github.com; a cache
    of our own. tests/test_recipes_docker.py has its own, which also turns the GPU off for its containers."""
    from recipe_fixtures import make_mirror, mirror_env

    commits = make_mirror(tmp_path)
    mirror_env(tmp_path, monkeypatch)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path, commits


@pytest.fixture(scope="session")
def default_image(docker_client, tmp_path_factory) -> str:
    """kernellab:cpu, the default image `make` built: reused by ID when its spec hash is the matrix's, else built
    once per session following the committed lock. Every test that only needs the default image takes this."""
    from kernellab import engine
    from kernellab.image import builder, network

    docker = engine.by_name("docker")
    spec = builder.resolve_request(target="cpu", engine=docker)
    ref = "kernellab:cpu"
    present = docker.exists(ref)
    if not (present and docker.labels(ref).get("kernellab.spec-sha256") == spec.digest):
        why = "was built for another spec" if present else "is missing"
        warnings.warn(f"{ref} {why}: built here, following the committed lock", stacklevel=2)
        builder.build(spec, lock="prefer", lock_dir=committed_locks(tmp_path_factory),
                     ca_certs=network.ca_certificates(), out=io.StringIO(), engine=docker)
    return ref


@pytest.fixture(autouse=True)
def _engine_choice_is_per_test():
    """engine.select() is process state (the task layer sets it): no test sees another's choice."""
    from kernellab import engine
    yield
    engine.select(None)


@pytest.fixture(scope="module", autouse=True)
def _prune_dangling_images_after_docker_modules(request):
    """KERNELLAB_CI_PRUNE=1 (.ci/run): after a module with Docker tests, drop the images its rebuilds left
    untagged, so that a CI disk holds one copy of each image instead of the last run's and this one's."""
    yield
    if os.environ.get("KERNELLAB_CI_PRUNE") != "1":
        return
    if any(item.module is request.module and item.get_closest_marker("docker") for item in request.session.items):
        subprocess.run(["docker", "image", "prune", "-f"], capture_output=True, check=False, timeout=600)
