"""Paper-era targets built for real, from Debian's archive and PyPI (no registry): Debian 11 with CUDA 11.2 and
PyTorch 1.13.1, CUDA 11.8 with PyTorch 2.0.1, Debian 11 on CPU with LLVM 11 as a library. Their packages
resolve as of each target's day; an op from kernels/ compiles in each CUDA one for sm_80 and loads in its torch;
a build following a lock installs its pip freeze (cu112-debian11 follows the committed one, cpu-debian11 the one it
just wrote); the demo recipe's CUDA half builds in the CUDA 11.8 one.

Tier `full` (`make test-full`): each builds an image of its own (cu112-debian11 about 8 GB, cu118-debian about
9 GB), removed again at the end when this session made it. Locks go to temporary folders.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kernellab import engine, proc
from kernellab.container import runner
from kernellab.image import builder, locks, network
from kernellab.recipes import build, read

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.full]
DOCKER = engine.by_name("docker")

#: In the container: build vector_add for the image's archs and load it into the image's torch.
LOAD_AN_OP = r"""
import json, subprocess, torch
from pathlib import Path
from kernellab.ops import binaries, library, spec
op = spec.parse_spec(Path("/workspace/kernels/vector_add/op.toml"))
built = library.build(op)
library.load(op)
nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
print("RESULT " + json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda, "nvcc": nvcc,
                              "cubins": binaries.fingerprint(built.device_code).cubins}))
"""


def _build(target: str, lock_dir: Path, **kw) -> builder.Built:
    spec = builder.resolve_request(target=target, engine=DOCKER)
    return builder.build(spec, lock_dir=lock_dir, ca_certs=network.ca_certificates(), out=io.StringIO(),
                         engine=DOCKER, **kw)


def _in_image(image: str, script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    log = tmp_path / "out.txt"
    with open(log, "w") as f:
        code = runner.run(image, ["python", "-c", script], gpu=False, out=f, engine=DOCKER)
    return code, log.read_text()


def _freeze(lock: dict) -> dict[str, str]:
    return dict(line.split("==", 1) for line in lock["pip_freeze"] if "==" in line)


@pytest.fixture(autouse=True)
def _drop_the_build_cache_in_ci():
    """These builds fill BuildKit's cache with CUDA 11 packages and PyTorch 1.13 and 2.0 wheels that no other test
    uses (each target here is of another Debian or CUDA): in CI (KERNELLAB_CI_PRUNE=1, .ci/run) it is dropped after
    each test, so the full tier fits the disk (one CI run had 12 GB free as cu118-debian began)."""
    yield
    if os.environ.get("KERNELLAB_CI_PRUNE") == "1":
        subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True, check=False, timeout=900)


@pytest.fixture
def made_here(docker_client):
    """Images a test builds that were not here before it: removed after it (these are large)."""
    before = {i.id for i in docker_client.images.list()}
    made: list[str] = []
    yield made
    for image_id in reversed(made):  # a child (a recipe's image) before its parent
        if image_id not in before:
            DOCKER.remove_image(image_id)


def test_cuda_11_2_from_debian_11_follows_its_lock_and_compiles_an_op_that_torch_1_13_loads(
        made_here, tmp_path, monkeypatch):
    """Built as `make` builds a target, following its committed lock (docker/locks/cu112-debian11.json, which a build
    resolving as of the target's day wrote): the image has the lock's pip freeze and Debian pins. When the lock no
    longer fits (the archive or the base moved on), the build resolves afresh and a second one follows the lock it
    wrote, as before. Resolving as of a day from scratch is shown below by cpu-debian11 (then rebuilt --locked) and
    cu118-debian; a second CUDA 11.2 build only to show it again cost CI about 4 of its minutes."""
    spec = builder.resolve_request(target="cu112-debian11", engine=DOCKER)
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    shutil.copyfile(locks.lock_path(spec), locks.lock_path(spec, lock_dir))
    committed = json.loads(locks.lock_path(spec).read_text())
    built = _build("cu112-debian11", lock_dir, lock="prefer")
    made_here.append(built.image_id)
    lock = json.loads(built.lock_file.read_text())
    if built.from_lock:
        assert lock["pip_freeze"] == committed["pip_freeze"], "--locked: the committed lock's freeze"
    else:  # the committed lock no longer fits: the lock resolved here, followed by a second build
        again = _build("cu112-debian11", lock_dir, lock="strict")
        made_here.append(again.image_id)
        assert again.from_lock and not again.lock_changed
        assert json.loads(again.lock_file.read_text())["pip_freeze"] == lock["pip_freeze"], "--locked: the same freeze"
    assert lock["spec"]["as_of"] == "2023-01-31" and lock["versions"]["nvcc"].startswith("11.2")
    assert any(p.startswith("nvidia-cuda-toolkit=11.2.2") for p in lock["debian"]["image"])
    freeze = _freeze(lock)
    assert freeze["torch"] == "1.13.1" and freeze["numpy"].startswith("1.24."), "packages of January 2023"
    code, out = _in_image(built.tags[0], LOAD_AN_OP, tmp_path, monkeypatch)
    assert code == 0, out[-3000:]
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["torch"] == "1.13.1+cu117" and "release 11.2" in result["nvcc"]
    assert {"sm_80", "sm_86"} <= set(result["cubins"]), "nvcc 11.2 built the op; torch's cu117 runtime loaded it"


def test_cuda_11_8_from_debian_carries_pypis_torch_2_0_1_and_its_ops_load(made_here, tmp_path, monkeypatch):
    built = _build("cu118-debian", tmp_path / "locks")
    made_here.append(built.image_id)
    lock = json.loads(built.lock_file.read_text())
    freeze = _freeze(lock)
    assert freeze["torch"] == "2.0.1" and int(freeze["numpy"].split(".")[0]) == 1, "numpy 1, of torch 2.0's time"
    assert DOCKER.labels(built.tags[0])["kernellab.torch-variant"] == "cu117"
    code, out = _in_image(built.tags[0], LOAD_AN_OP, tmp_path, monkeypatch)
    assert code == 0, out[-3000:]
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["torch"].startswith("2.0.1") and result["torch_cuda"] == "11.7" and "release 11.8" in result["nvcc"]
    assert "sm_80" in result["cubins"]
    # The demo recipe's CUDA half builds here too ({use_cuda} ON, nvcc 11.8 for the target's archs, {gencode}).
    recipe = read.load("demo")
    demo = build.build(recipe, target="cu118-debian", engine=DOCKER, out=io.StringIO())
    made_here.append(demo.image_id)
    assert demo.env.values["use_cuda"] == "ON" and "arch=compute_80" in demo.env.values["gencode"]
    argv = DOCKER.run_argv(demo.image_id, ["cuobjdump", "--list-elf", "/src/build/transpose_cuda"],
                           user=(0, 0), network="none", init=False, shm_size=None)
    assert "sm_80" in proc.run(argv).stdout


def test_debian_11_on_cpu_has_llvm_11_as_a_library_and_the_packages_of_mid_2021(docker_client, tmp_path,
                                                                                 monkeypatch):
    built = _build("cpu-debian11", tmp_path / "locks")
    lock = json.loads(built.lock_file.read_text())
    freeze = _freeze(lock)
    assert freeze["numpy"] == "1.20.3" and "torch" not in freeze, "June 2021's numpy, no PyTorch"
    assert "watchfiles" in freeze, "kernellab's own tools come undated"
    script = ("import subprocess, sys; print('RESULT', sys.version.split()[0], "
              "subprocess.run(['llvm-config-11', '--version'], capture_output=True, text=True).stdout.strip(), "
              "subprocess.run(['cmake', '--version'], capture_output=True, text=True).stdout.split()[2])")
    code, out = _in_image(built.tags[0], script, tmp_path, monkeypatch)
    assert code == 0, out[-2000:]
    python, llvm, cmake = out.split("RESULT ", 1)[1].split()[:3]
    assert python.startswith("3.9.") and llvm.startswith("11.") and cmake.startswith("3.18.")
    again = _build("cpu-debian11", tmp_path / "locks", lock="strict")
    assert again.from_lock and json.loads(again.lock_file.read_text())["pip_freeze"] == lock["pip_freeze"]
