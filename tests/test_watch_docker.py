"""`invoke watch --target cpu` for real: the watcher in the cpu image's container sees an edit made on the
host (inotify through the bind mount), and Ctrl-C stops it and leaves no kernellab container running.

The op is a copy of rmsnorm_cpu in a scratch folder inside the repository (the container sees only the
repository), so the real kernels/ are never edited. The cpu image is the one CI's `make` builds; when it
is missing or was built from another spec, it is built here (as tests/test_images_docker.py does).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernellab import ROOT, engine
from test_watch import BREAK, EDIT_S, FIRST_BUILD_S, OP, Watcher, copy_op

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = engine.by_name("docker")


@pytest.fixture(scope="module")
def cpu_image(default_image: str) -> str:
    """kernellab:cpu as the matrix describes it now (so it has watchfiles): conftest's default_image."""
    return default_image


def watch_containers(marker: str) -> set[str]:
    """Running kernellab containers whose command names `marker` (this test's scratch folder): another
    user's containers on the same engine are none of this test's business."""
    out = subprocess.run(["docker", "ps", "--no-trunc", "--filter", "name=kernellab-", "--format", "{{.ID}} {{.Command}}"],
                         check=True, capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if marker in line}


def _left(marker: str, timeout: float = 20) -> set[str]:
    """This test's kernellab containers still running after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (left := watch_containers(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_watch_in_the_cpu_container_sees_host_edits_and_ctrl_c_removes_it(cpu_image: str, tmp_path: Path) -> None:
    (ROOT / ".cache").mkdir(exist_ok=True)  # git-ignored, and inside the repository the container mounts
    scratch = Path(tempfile.mkdtemp(dir=ROOT / ".cache", prefix="watch-docker-"))
    marker = scratch.name
    watchers: list[Watcher] = []
    try:
        kernel = copy_op(scratch / "kernels") / "rmsnorm.cpp"
        good = kernel.read_text()
        env = {**os.environ, "KERNELLAB_CACHE": str(tmp_path / "cache"), "KERNELLAB_ENGINE": "docker",
               "TERM": "dumb", "PYTHONPATH": str(ROOT / "src")}
        argv = [sys.executable, "-m", "invoke", "watch", "--target", "cpu", "-k", OP, "--kernels", str(scratch / "kernels")]

        # 1. One edit round trip, then Ctrl-C at the terminal (SIGINT to the whole foreground group).
        w = Watcher(argv, env)
        watchers.append(w)
        status, block = w.result(FIRST_BUILD_S)
        assert status.startswith(f"PASS {OP}: 60 cases"), block
        assert watch_containers(marker), "the watcher runs in a kernellab container"
        kernel.write_text(good.replace(*BREAK))
        status, block = w.result(EDIT_S)
        assert status.startswith(f"FAIL {OP}: 30 of 60 cases fail;") and "elements differ" in block, block
        os.killpg(w.proc.pid, signal.SIGINT)
        rest = w.rest(60)
        assert w.proc.returncode == 130, rest
        assert f"watch: stopped watching {OP}." in rest and "Traceback" not in rest, rest
        assert not _left(marker), "a kernellab container is still running after Ctrl-C"

        # 2. The fix recovers in a new watcher; SIGINT to the invoke process alone (kill -INT) also stops it all.
        kernel.write_text(good)
        w = Watcher(argv, env)
        watchers.append(w)
        status, block = w.result(EDIT_S)
        assert status.startswith(f"PASS {OP}:") and "rebuilt in" in block, block
        os.kill(w.proc.pid, signal.SIGINT)
        rest = w.rest(60)
        assert w.proc.returncode == 130, rest
        assert not _left(marker), "a kernellab container is still running after SIGINT to invoke"
    finally:
        for w in watchers:
            w.kill()
        for container in _left(marker, timeout=0):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
