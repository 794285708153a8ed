"""Integration tests against a real Docker engine: real builds, real containers.

The cpu target is built once per session (fixture) on a base made locally with debootstrap;
no registry is needed. Locks go to a temporary folder, never into docker/locks/.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import committed_locks
from kernellab import ROOT, engine
from kernellab.container import runner
from kernellab.errors import BuildError, DockerError, ResolveError
from kernellab.image import builder, locks, network, targets
from kernellab.image.resolve import resolve

pytestmark = [pytest.mark.docker, pytest.mark.slow]
M = targets.load()
DOCKER = engine.by_name("docker")


def cpu_spec(**kw):
    """The cpu target resolved as `invoke build-image` resolves it (same PyTorch index rule as the tasks)."""
    return builder.resolve_request(target="cpu", engine=DOCKER, **kw)


@pytest.fixture(scope="session")
def lock_dir(tmp_path_factory) -> Path:
    """The committed locks (copies): the cpu build follows cpu.json, as `make` did, and is served from cache."""
    return committed_locks(tmp_path_factory)


@pytest.fixture(scope="session")
def cpu_image(docker_client, lock_dir):
    """The cpu target, built for real: (Built, build log)."""
    log = io.StringIO()
    t0 = time.monotonic()
    built = builder.build(cpu_spec(), lock="prefer", lock_dir=lock_dir, ca_certs=network.ca_certificates(), out=log,
                         engine=DOCKER)
    return built, log.getvalue(), time.monotonic() - t0


def run(image: str, *cmd: str) -> str:
    return subprocess.run(["docker", "run", "--rm", "--network", "none", image, *cmd],
                          check=True, capture_output=True, text=True).stdout


def test_build_labels_every_version_and_the_lock_hash(cpu_image):
    built, _, _ = cpu_image
    labels = DOCKER.labels(built.tags[0])
    assert labels["kernellab.torch"] == "2.13.0" and labels["kernellab.python"] == "3.11"
    assert labels["kernellab.kind"] == "cpu" and labels["kernellab.gcc"] == "12"
    assert labels["kernellab.spec-sha256"] == built.spec.digest
    assert labels["kernellab.lock-sha256"] == built.lock_sha256
    assert set(built.tags) == {built.spec.tag, "kernellab:cpu"}
    assert DOCKER.image_id("kernellab:cpu") == built.image_id


def test_lock_records_base_digest_freeze_and_toolchain(cpu_image):
    built, _, _ = cpu_image
    lock = json.loads(built.lock_file.read_text())
    assert locks.lock_digest(lock) == built.lock_sha256
    assert lock["base"]["digest"].startswith("sha256:")
    assert any(line.startswith("torch==2.13.0") for line in lock["pip_freeze"])
    assert any(line.startswith("ninja==") for line in lock["pip_freeze"])
    assert lock["versions"]["gcc"].startswith("12.") and lock["versions"]["python"].startswith("3.11")
    inside = json.loads(run(built.tags[0], "cat", "/etc/kernellab/lock.json"))
    assert inside == lock


def test_image_has_venv_ninja_and_the_pinned_compiler_on_path(cpu_image):
    built, _, _ = cpu_image
    out = run(built.tags[0], "bash", "-c", "which python ninja gcc; gcc -dumpversion; python -c 'import torch; print(torch.__version__)'")
    assert "/opt/venv/bin/python" in out and "/opt/venv/bin/ninja" in out and "\n12\n" in out and "2.13.0" in out


def test_container_runs_as_the_callers_uid_and_files_stay_theirs(cpu_image, tmp_path, monkeypatch):
    built, _, _ = cpu_image
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "repo"
    work.mkdir()
    os.chmod(work, 0o777)
    code = runner.run(built.tags[0], ["bash", "-c", "id -u > /workspace/made-by.txt && touch /cache/home/x"],
                          gpu=False, user=(1000, 1000), repo=work)
    assert code == 0
    made = work / "made-by.txt"
    assert made.read_text().strip() == "1000"
    assert (made.stat().st_uid, made.stat().st_gid) == (1000, 1000)
    assert (tmp_path / "cache" / "home" / "x").stat().st_uid == 1000


def test_container_exit_code_is_the_commands(cpu_image, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    assert runner.run(cpu_image[0].tags[0], ["bash", "-c", "exit 7"], gpu=False) == 7


def test_unchanged_rebuild_is_served_from_cache(cpu_image, lock_dir):
    built, _, _ = cpu_image
    log = io.StringIO()
    again = builder.build(cpu_spec(), lock="prefer", lock_dir=lock_dir, ca_certs=network.ca_certificates(), out=log,
                         engine=DOCKER)
    text = log.getvalue()
    assert again.image_id == built.image_id, "same inputs, same image"
    run_steps = [ln for ln in text.splitlines() if "] RUN " in ln and ln.startswith("#")]
    step_ids = [ln.split()[0] for ln in run_steps]
    assert len(step_ids) >= 3 and all(f"{i} CACHED" in text for i in step_ids), "every RUN step came from cache"


def test_locked_rebuild_reproduces_the_same_pip_freeze(cpu_image, lock_dir):
    built, _, _ = cpu_image
    lock = json.loads(built.lock_file.read_text())
    again = builder.build(cpu_spec(), lock_dir=lock_dir, lock="strict", ca_certs=network.ca_certificates(),
                         out=io.StringIO(), engine=DOCKER)
    relock = json.loads(again.lock_file.read_text())
    assert relock["pip_freeze"] == lock["pip_freeze"]
    assert relock["base"] == lock["base"]


def test_locked_refuses_a_lock_made_for_another_spec(cpu_image, lock_dir):
    other = dataclasses.replace(cpu_spec(), target="cpu")
    path = locks.lock_path(other, lock_dir)
    lock = json.loads(path.read_text())
    spec = dataclasses.replace(other, extra_pip=("six",))
    with pytest.raises(BuildError, match="different spec .*extra_pip"):
        locks.read_lock(spec, lock_dir)
    assert json.loads(path.read_text()) == lock


def test_a_failing_step_is_named_and_the_previous_image_of_the_tag_is_kept(cpu_image, lock_dir):
    current = DOCKER.image_id("kernellab:cpu")  # earlier tests may have moved the tag
    bad = dataclasses.replace(cpu_spec(), extra_apt=("kernellab-no-such-package",), target=None)
    subprocess.run(["docker", "tag", current, bad.tag], check=True)
    with pytest.raises(BuildError) as e:
        builder.build(bad, lock_dir=lock_dir, out=io.StringIO(), engine=DOCKER)
    msg = str(e.value)
    assert "failed at step" in msg and "apt-get" in msg and "kernellab-no-such-package" in msg
    assert DOCKER.image_id(bad.tag) == current, "the old image still holds the tag"
    subprocess.run(["docker", "rmi", "--no-prune", bad.tag], check=True, capture_output=True)


def test_no_engine_is_one_clear_sentence(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DockerError, match="cannot reach a Docker engine at unix:///nonexistent/docker.sock"):
        DOCKER.require()


def test_missing_base_image_says_how_to_get_it(docker_client):
    spec = dataclasses.replace(resolve(M, cuda="12.4", gpu="h100"), base="kernellab-test/no-such-base:1")
    with pytest.raises(BuildError, match="could not be pulled.*import-image"):
        builder.ensure_base(spec, out=io.StringIO(), engine=DOCKER)


@pytest.fixture(scope="session")
def pip_toolkit_image(docker_client, lock_dir):
    """cu130-pip (nvcc from PyPI wheels) built from scratch: another image than the default one (tier full)."""
    # torch 2.13.0 is a cu130 build on PyPI; a site's find-links may serve its own build of it (CI: CPU).
    spec = resolve(M, target="cu130-pip", torch="2.13.0", torch_index=os.environ.get("KERNELLAB_TORCH_INDEX"))
    return builder.build(spec, lock_dir=lock_dir, ca_certs=network.ca_certificates(), out=io.StringIO(), engine=DOCKER)


CUDA_SRC = r"""
#include <cub/block/block_reduce.cuh>
__global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
__global__ void total(const float* x, float* out) {
  using R = cub::BlockReduce<float, 128>; __shared__ typename R::TempStorage t;
  float s = R(t).Sum(x[threadIdx.x]); if (threadIdx.x == 0) *out = s; }
extern "C" int kl_scale(float* x, float a, int n) { scale<<<(n + 127) / 128, 128>>>(x, a, n); return (int)cudaGetLastError(); }
"""


@pytest.mark.full
def test_pip_toolkit_image_compiles_a_cuda_extension_without_a_gpu(pip_toolkit_image, tmp_path, monkeypatch):
    built = pip_toolkit_image
    assert DOCKER.labels(built.tags[0])["kernellab.kind"] == "cuda-pip"
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "ext"
    work.mkdir()
    os.chmod(work, 0o777)
    (work / "k.cu").write_text(CUDA_SRC)
    script = ('set -e; nvcc --version | grep "release 13.0"; '
              'nvcc $KERNELLAB_NVCC_GENCODE -Xptxas -v -Xcompiler -fPIC -shared -lineinfo /workspace/k.cu '
              '-o /workspace/libk.so 2> /workspace/ptxas.txt; '
              # torch's own lookup (a CPU build of torch leaves cpp_extension.CUDA_HOME unset)
              'python -c "import torch.utils.cpp_extension as c; print(c._find_cuda_home())" > /workspace/cuda_home.txt')
    assert runner.run(built.tags[0], ["bash", "-c", script], gpu=False, repo=work) == 0
    ptxas = (work / "ptxas.txt").read_text()  # ptxas reports each SASS target it compiled
    for sm in ("sm_80", "sm_86", "sm_89", "sm_90"):
        assert f"for '{sm}'" in ptxas
    assert (work / "libk.so").stat().st_size > 10_000
    assert (work / "cuda_home.txt").read_text().strip() == built.spec.cuda_home
    assert (work / "libk.so").stat().st_uid == os.getuid()


def test_base_image_with_pytorch_is_verified_and_never_reinstalled(cpu_image, lock_dir):
    """A site image (here: the cpu image standing in for an NGC/site container) keeps its torch."""
    site = "kernellab-test/site-base:1"
    subprocess.run(["docker", "tag", "kernellab:cpu", site], check=True)
    try:
        spec = builder.resolve_request(base_image=site, gpu="cpu", engine=DOCKER)
        assert (spec.kind, spec.torch, spec.torch_variant) == ("base-image", "2.13.0", "preinstalled")
        log = io.StringIO()
        on_site = builder.build(spec, lock_dir=lock_dir, out=log, engine=DOCKER)
        assert "pip install" not in log.getvalue()
        assert DOCKER.labels(on_site.tags[0])["kernellab.torch-variant"] == "preinstalled"
        with pytest.raises(ResolveError, match="has PyTorch 2.13.0\\+cpu, not 2.5"):
            builder.resolve_request(base_image=site, gpu="cpu", torch="2.5", engine=DOCKER)
    finally:
        subprocess.run(["docker", "rmi", "--no-prune", site], capture_output=True)


INTERRUPTED_BUILD = """
import dataclasses, sys
sys.path.insert(0, "src")
from kernellab import engine
from kernellab.image import builder
spec = builder.resolve_request(target="cpu")
spec = dataclasses.replace(spec, target=None, extra_apt=("cowsay",))
print(spec.tag, flush=True)
builder.build(spec, lock_dir=__import__("pathlib").Path(sys.argv[1]), engine=engine.by_name("docker"))
"""


def test_ctrl_c_mid_build_tags_nothing(cpu_image, tmp_path):
    import signal
    p = subprocess.Popen([sys.executable, "-c", INTERRUPTED_BUILD, str(tmp_path)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tag = p.stdout.readline().strip()
    seen = ""
    for line in p.stdout:  # interrupt once the build is inside its first RUN step
        seen += line
        if "] RUN " in line:
            break
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in seen + rest
    assert tag.startswith("kernellab:cpu-") and not DOCKER.exists(tag)
    assert not list(tmp_path.glob("*.json")), "no lock for an interrupted build"
    leftovers = subprocess.run(["docker", "images", "-q", "kernellab-staging"], capture_output=True, text=True).stdout
    assert leftovers.strip() == ""
