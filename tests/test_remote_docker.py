"""--host ssh://...: another machine's Docker engine as a place, for real. An sshd on 127.0.0.1 that the tests start
with keys they make; the docker CLI and SDK, kernellab's ssh and rsync reach the engine through it (an `ssh` first on
PATH adds the test's client configuration, as ~/.ssh/config would). The "server" is this machine, so its engine
already has the default image: the repository mirror, GPUs, results brought back, the image sent with kernellab's
export and Ctrl-C are what is tested here.

Needs openssh-server and rsync (`make test-tools`). make test: the repository mirror (seconds); the full tier: a
run of each kind (tests, a bench, the demo recipe), an image sent twice (the Debian base: a full export, then a
delta) and Ctrl-C, about 2 minutes on 2 cores (docs/testing.md).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernellab import ROOT, remote
from kernellab.engine import by_name
from kernellab.image.kinds import debootstrap_cpu

pytestmark = [pytest.mark.docker]
SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, default_image: str):
    """ssh://USER@127.0.0.1:PORT reaching this machine's Docker engine; PATH carries the test's ssh."""
    missing = [t for t in ("ssh", "ssh-keygen", "rsync") if shutil.which(t) is None] + ([] if SSHD.exists() else ["sshd"])
    if missing:
        problem = f"the remote-host tests need {', '.join(missing)} (`sudo make test-tools`)"
        if os.environ.get("KERNELLAB_REQUIRE_DOCKER") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n"
        f"PidFile {d}/sshd.pid\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    sshd = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE, text=True)
    (d / "ssh_config").write_text(f"Host 127.0.0.1\n  IdentityFile {d}/client_key\n  StrictHostKeyChecking no\n"
                                  "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    bin_dir = d / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {d}/ssh_config \"$@\"\n")
    (bin_dir / "ssh").chmod(0o755)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}:{old_path}"
    url = f"ssh://{os.environ.get('USER') or 'root'}@127.0.0.1:{port}"
    try:
        for _ in range(50):  # sshd is up when it answers
            if subprocess.run(["ssh", "-p", str(port), "-o", "BatchMode=yes", "127.0.0.1", "true"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the test's sshd did not answer: {sshd.stderr.read() if sshd.poll() is not None else ''}")
        yield url
    finally:
        os.environ["PATH"] = old_path
        sshd.terminate()
        sshd.wait(timeout=30)
        remote._hosts.clear()


def invoke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.full
def test_the_kernel_tests_run_in_the_servers_engine_on_its_copy_of_the_repository(server: str) -> None:
    r = invoke("test", "-k", "rmsnorm_cpu", "--host", server)   # its default target: the server has no GPU
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "passed" in out and "Traceback" not in out
    copy = Path(remote.at(server).base()) / "workspace"   # the server is this machine: its copy is a folder here
    assert (copy / "kernels" / "vector_add").is_dir() and (copy / "results").is_dir()
    assert not (copy / ".git").exists() and not (copy / ".venv").exists(), "only the repository's own files travel"


def test_a_second_run_sends_only_what_changed_and_deletes_what_was_deleted(server: str) -> None:
    host = remote.SshHost(remote.Address.parse(server))
    copy = Path(host.workspace())
    probe = ROOT / "kernels" / "_remote_probe.txt"   # untracked, not ignored: it travels
    try:
        probe.write_text("one\n")
        readme_inode = (copy / "README.md").stat().st_ino
        again = remote.SshHost(remote.Address.parse(server))   # a new process would sync again
        again.workspace()
        assert (copy / "kernels" / "_remote_probe.txt").read_text() == "one\n"
        assert (copy / "README.md").stat().st_ino == readme_inode, "an unchanged file is not copied again"
        probe.unlink()
        remote.SshHost(remote.Address.parse(server)).workspace()
        assert not (copy / "kernels" / "_remote_probe.txt").exists(), "a file deleted here is deleted there"
    finally:
        probe.unlink(missing_ok=True)


@pytest.mark.full
def test_a_bench_on_the_server_comes_back_to_this_checkouts_results(server: str, tmp_path: Path) -> None:
    r = invoke("bench", "--quick", "-k", "vector_add", "--host", server, "--target", "cpu")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    line = next(x for x in out.splitlines() if x.startswith("results in "))
    name = Path(line.split()[-1]).name   # the container's /workspace/results/<run>
    try:
        folder = ROOT / "results" / name
        data = json.loads((folder / "results.json").read_text())
        assert data and (folder / "summary.md").is_file(), "the run's files came back"
    finally:
        shutil.rmtree(ROOT / "results" / name, ignore_errors=True)


@pytest.mark.full
def test_the_demo_recipe_runs_on_the_server_and_its_record_is_written_here(server: str, tmp_path: Path) -> None:
    r = invoke("recipe", "run", "demo", "--quick", "--host", server, "--gpu-mode", "none", "--out", str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    run = json.loads(next(tmp_path.glob("demo/*/run.json")).read_text())
    assert run["cases"] and not [c for c in run["cases"] if c.get("problem")], out


@pytest.mark.full
def test_the_image_goes_to_the_server_as_kernellabs_export_and_a_second_time_as_a_delta(
        server: str, default_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    host = remote.SshHost(remote.Address.parse(server))
    # The Debian base the default image is built on (make made it): the same path as any image, a tenth the bytes.
    image = by_name("docker").image(debootstrap_cpu.local_tag("bookworm"))
    host.send(image)     # the server is this engine: the load finds every layer there, and checks them
    state = remote._sent_state(host.address) / "last-manifest.json"
    assert json.loads(state.read_text())["image"]["id"] == image.id
    host.send(image)     # the server still has the last image sent: this one goes as a delta against it
    assert json.loads(state.read_text()).get("delta"), "the second send was a delta"
    assert host.image(image).id == image.id


@pytest.mark.full
def test_ctrl_c_removes_the_container_on_the_server(server: str) -> None:
    docker = by_name("docker")
    before = set(subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True).stdout.split())
    p = subprocess.Popen([sys.executable, "-m", "invoke", "shell", "--cmd", "sleep 600", "--host", server,
                          "--target", "cpu", "--gpu-mode", "none"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        started = set()
        for _ in range(300):
            started = set(subprocess.run(["docker", "ps", "-q", "--filter", "name=kernellab-"], capture_output=True,
                                         text=True).stdout.split()) - before
            if started:
                break
            time.sleep(0.2)
        assert started, "the container started on the server"
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=60)
        for _ in range(100):
            if not set(subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True).stdout.split()) & started:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the container still runs on the server after Ctrl-C")
    finally:
        if p.poll() is None:
            p.kill()
        for c in started:
            docker.remove_container(c)
