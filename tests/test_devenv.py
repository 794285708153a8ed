"""Dev containers, notebooks and image extras without an engine: the files, command lines and choices.

The docker-marked tests (tests/test_devenv_docker.py) run the same things for real: the
devcontainers CLI on the written file, JupyterLab in the cpu image, a browser on its page.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from invoke import Config, Context

from fake_engine import fake, image
from kernellab import engine, gpu, proc
from kernellab.cli import devenv as devenv_tasks
from kernellab.container import devenv, runner
from kernellab.engine import podman as podman_module
from kernellab.errors import ConfigError, KernellabError, ResolveError
from kernellab.image import builder, render, targets
from kernellab.image.resolve import resolve
from kernellab.image.spec import BaseFacts
from kernellab.image.target_table import Target, parse_target

ROOT = Path(__file__).resolve().parents[1]
M = targets.load()
IMAGES = {
    "kernellab:cpu": image("sha256:c0ffee", env=["PATH=/opt/venv/bin:/usr/bin"],
                           labels={"kernellab.extras": "jupyter", "kernellab.target": "cpu"}),
    "kernellab:old": image("sha256:01d", labels={"kernellab.target": "old"}),
}


@pytest.fixture
def docker():
    return fake("docker", IMAGES)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "host_gpus", lambda: [])


# --------------------------------------------------------------------------- extras in the image

def test_the_cpu_target_has_the_jupyter_extra_as_one_pip_step_after_pytorchs():
    spec = resolve(M, target="cpu")
    assert spec.extras == ("jupyter",) and spec.extras_pip == M.extras["jupyter"].pip
    text = render.dockerfile(spec, M)
    steps = [ln for ln in text.splitlines() if ln.strip().startswith("pip install")]
    assert len(steps) == 2 and "torch==" in steps[0], "PyTorch's step, then one step for the extras"
    assert steps[1].strip() == "pip install 'jupyterlab>=4'"
    assert 'kernellab.extras="jupyter"' in text
    assert spec.to_dict()["extras"] == ("jupyter",), "extras are part of the spec (and its digest)"


def test_a_locked_build_installs_the_extras_from_the_lock():
    text = render.dockerfile(resolve(M, target="cpu"), M, locked=True)
    assert "jupyterlab" not in text, "the lock's requirements already hold the extras' packages"
    assert text.count("pip install") == 1


def test_a_target_without_extras_has_no_extra_step():
    spec = resolve(M, target="cu121-a100")
    assert spec.extras == () and "Extras" not in render.dockerfile(spec, M)
    assert 'kernellab.extras=""' in render.dockerfile(spec, M)


def test_an_unknown_extra_is_refused_naming_the_closest():
    m = dataclasses.replace(M, targets={"x": Target(name="x", gpu=("cpu",), os="debian12", extras=("jupyterr",))})
    with pytest.raises(ResolveError, match=r"unknown extra `jupyterr` \(did you mean jupyter\?\); known extras: jupyter"):
        resolve(m, target="x")


def test_extras_are_a_list_in_targets_toml():
    assert parse_target("x", {"extras": ["jupyter"]}).extras == ("jupyter",)
    with pytest.raises(ConfigError, match=r'`extras` must be a list of strings such as extras = \["jupyter"\]'):
        parse_target("x", {"extras": "jupyter"})


def test_a_base_image_target_refuses_extras():
    m = dataclasses.replace(M, targets={"site": Target(name="site", base="site:1", gpu=("h100",), extras=("jupyter",))})
    facts = BaseFacts(python="3.12.3", torch="2.11.0+cu130", torch_cuda="13.0")
    with pytest.raises(ResolveError, match="cannot take extras"):
        resolve(m, target="site", base_facts=facts)


def test_an_image_without_the_extra_says_how_to_get_it_in_one_sentence(docker):
    devenv.require_extra("kernellab:cpu", "cpu", "jupyter", engine=docker)
    with pytest.raises(KernellabError) as e:
        devenv.require_extra("kernellab:old", "old", "jupyter", engine=docker)
    msg = str(e.value)
    assert 'add `extras = ["jupyter"]` to [target.old] in docker/targets.toml' in msg
    assert "`invoke build-image --target old`" in msg and msg.count(". ") == 0 and msg.endswith(".")


# --------------------------------------------------------------------------- devcontainer.json

def _config(docker, mode=None, user=(1234, 567), tmp: Path = Path("/tmp/kl-cache")):
    return devenv.devcontainer_config("cpu", "kernellab:cpu", gpu_mode=mode, user=user, cache=tmp, engine=docker)


def test_devcontainer_has_the_image_repo_caches_user_and_no_gpu_flag_without_a_gpu(docker, tmp_path):
    c = _config(docker, tmp=tmp_path)
    assert c["image"] == "kernellab:cpu" and c["workspaceFolder"] == "/workspace"
    assert c["workspaceMount"] == "source=${localWorkspaceFolder},target=/workspace,type=bind"
    assert c["mounts"] == [{"source": str(tmp_path), "target": "/cache", "type": "bind"}]
    env = c["containerEnv"]
    assert env["HOME"] == "/cache/home" and env["KERNELLAB_CACHE"] == "/cache" and env["PYTHONPATH"] == "/workspace/src"
    assert env["PIP_CACHE_DIR"] == "/cache/pip"
    # The image's user is root and it has no other: the container runs as the caller's UID:GID itself.
    assert c["containerUser"] == "1234:567" and c["updateRemoteUserUID"] is False
    assert c["hostRequirements"] == {"gpu": "optional"}
    assert not any(a in ("--gpus", "--device") for a in c["runArgs"])
    assert "--privileged" not in c["runArgs"] and "privileged" not in c
    exts = c["customizations"]["vscode"]["extensions"]
    assert {"ms-vscode.cpptools", "nvidia.nsight-vscode-edition", "ms-python.python"} <= set(exts)


@pytest.mark.parametrize("mode,flags", [("nvidia", ["--gpus", "all"]), ("cdi", ["--device", "nvidia.com/gpu=all"])])
def test_devcontainer_passes_the_gpu_the_way_doctor_finds(docker, mode, flags):
    c = _config(docker, mode)
    args = c["runArgs"]
    assert any(args[i:i + 2] == flags for i in range(len(args)))
    assert "hostRequirements" not in c, "the flags are in runArgs; the CLI must not add --gpus a second time"


def test_devcontainer_devices_mode_mounts_the_driver_and_extends_paths(docker, monkeypatch):
    monkeypatch.setattr(gpu, "device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    monkeypatch.setattr(gpu, "driver_files", lambda: {"/usr/lib/libcuda.so.1": "/usr/local/nvidia/lib64/libcuda.so.1"})
    c = _config(docker, "devices")
    assert ["--device", "/dev/nvidia0"] == c["runArgs"][c["runArgs"].index("/dev/nvidia0") - 1:][:2]
    assert "/usr/lib/libcuda.so.1:/usr/local/nvidia/lib64/libcuda.so.1:ro" in c["runArgs"]
    assert c["containerEnv"]["PATH"] == "/opt/venv/bin:/usr/bin:/usr/local/nvidia/bin"


def test_devcontainer_for_rootless_podman_keeps_the_uid_and_uses_host_networking(monkeypatch):
    monkeypatch.setattr(podman_module.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(podman_module.os.path, "exists", lambda p: False)  # no catatonit
    c = _config(fake("podman", IMAGES), user=(1000, 1000))
    assert "--userns=keep-id" in c["runArgs"] and "--user" not in c["runArgs"]
    assert c["runArgs"][c["runArgs"].index("--network") + 1] == "host"
    assert c["init"] is False and c["containerUser"] == "1000:1000"


def test_write_devcontainer_writes_the_targets_folder_and_is_not_committed(docker, no_gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    path = devenv.write_devcontainer("cpu", "kernellab:cpu", user=(os.getuid(), os.getgid()), root=tmp_path,
                                     engine=docker)
    assert path == tmp_path / ".devcontainer" / "cpu" / "devcontainer.json"
    assert path.read_text().startswith("// kernellab dev container for target `cpu`")
    config = devenv.read_jsonc(path)
    assert config["mounts"][0]["source"] == str((tmp_path / "cache").resolve())
    assert (tmp_path / "cache" / "home").is_dir(), "the caches exist before the container mounts them"
    ignored = subprocess.run(["git", "check-ignore", "-q", ".devcontainer/cpu/devcontainer.json"], cwd=ROOT)
    assert ignored.returncode == 0, "machine-specific: .devcontainer/ is in .gitignore"


def test_an_unknown_gpu_mode_is_refused(docker):
    with pytest.raises(KernellabError, match="unknown GPU mode `cuda`"):
        devenv.gpu_mode("cuda", engine=docker)


def test_a_missing_image_is_built_first(monkeypatch, tmp_path, no_gpu):
    built: list[str] = []
    known = {ref: facts for ref, facts in IMAGES.items() if ref != "kernellab:cpu"}
    eng = fake("docker", known)  # the real builder.image_for_target asks it; a build teaches it the tag

    def build(spec, **kw):
        assert kw["engine"] is eng
        built.append(spec.target)
        known[f"kernellab:{spec.target}"] = IMAGES["kernellab:cpu"]

    monkeypatch.setattr(builder, "resolve_request", lambda target, engine=None: resolve(M, target=target))
    monkeypatch.setattr(builder, "build", build)
    with pytest.raises(KernellabError, match="kernellab:cpu is not built"):
        builder.image_for_target("cpu", engine=eng)
    out = io.StringIO()
    assert devenv.ensure_image("cpu", engine=eng, out=out).ref == "kernellab:cpu"
    assert "kernellab:cpu is not built yet; building it first" in out.getvalue()
    assert built == ["cpu"]
    assert devenv.ensure_image("cpu", engine=eng, out=io.StringIO()).ref == "kernellab:cpu"
    assert built == ["cpu"], "built once"


# --------------------------------------------------------------------------- notebook

def test_publish_goes_to_docker_and_is_moot_on_podmans_host_network(docker, tmp_path, monkeypatch):
    argv = runner.run_argv("kernellab:cpu", ["jupyter", "lab"], user=(1, 1), repo=tmp_path, cache=tmp_path,
                               publish=["127.0.0.1:8888:8888"], pass_env=["JUPYTER_TOKEN"], engine=docker)
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8888:8888"
    assert argv[argv.index("JUPYTER_TOKEN") - 1] == "-e", "the token goes by name only"
    monkeypatch.setattr(podman_module.os, "geteuid", lambda: 1000)
    pod = runner.run_argv("kernellab:cpu", [], user=(1, 1), repo=tmp_path, cache=tmp_path,
                              publish=["127.0.0.1:8888:8888"], engine=fake("podman", IMAGES))
    assert "-p" not in pod and pod[pod.index("--network") + 1] == "host"


def test_notebook_token_is_random_and_never_on_the_command_line(docker):
    a, b = devenv.notebook(8888, user=(1000, 1000), engine=docker), devenv.notebook(8888, user=(0, 0), engine=docker)
    assert a.token != b.token and len(a.token) >= 32
    assert not any(a.token in x for x in a.argv) and a.env == {"JUPYTER_TOKEN": a.token}
    assert f"--ServerApp.port={a.port}" in a.argv and "--ServerApp.port_retries=0" in a.argv
    assert a.listen == "0.0.0.0" and a.publish == [f"127.0.0.1:{a.port}:{a.port}"]
    assert "--allow-root" not in a.argv and "--allow-root" in b.argv
    assert a.url == f"http://127.0.0.1:{a.port}/lab?token={a.token}"


def test_on_podmans_host_network_the_server_itself_listens_on_loopback(monkeypatch):
    monkeypatch.setattr(podman_module.os, "geteuid", lambda: 1000)
    assert devenv.notebook(8888, user=(1000, 1000), engine=fake("podman", IMAGES)).listen == "127.0.0.1"


def test_ssh_tunnel_line_uses_this_hosts_name():
    assert devenv.ssh_tunnel(8890, user="ada") == f"ssh -L 8890:127.0.0.1:8890 ada@{socket.gethostname()}"


@pytest.fixture
def busy_port():
    """A port something listens on (127.0.0.1), as a running server would hold it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def test_free_port_skips_a_port_in_use(busy_port):
    assert devenv.free_port(busy_port) > busy_port
    with pytest.raises(KernellabError, match="between 1 and 65535"):
        devenv.free_port(70000)


_real_notebook = devenv.notebook


def test_notebook_task_takes_the_next_free_port_and_says_so(busy_port, monkeypatch, capsys, tmp_path):
    """The real task, image lookup and runner.run against a fake docker: the command line it starts."""
    docker = fake("docker", IMAGES)
    monkeypatch.setenv("KERNELLAB_ENGINE", "docker")
    monkeypatch.setitem(engine._instances, "docker", docker)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(runner, "best_gpu_mode", lambda eng=None: None)
    monkeypatch.setattr(devenv, "notebook", lambda port, **kw: dataclasses.replace(
        _real_notebook(port, **kw), allow_root=False))
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(proc, "call", lambda argv, **kw: calls.append({"argv": list(argv), **kw}) or 130)  # Ctrl-C
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.2 50000 10.0.0.1 22")
    devenv_tasks.notebook.body(Context(Config()), target="cpu", port=busy_port)
    out = capsys.readouterr().out
    (call,) = calls
    argv = call["argv"]
    assert argv[:2] == ["docker", "run"] and "kernellab:cpu" in argv
    published = argv[argv.index("-p") + 1]
    port = int(published.split(":")[1])
    assert port > busy_port
    assert published == f"127.0.0.1:{port}:{port}" and argv.count("-p") == 1
    assert f"port {busy_port} is in use on 127.0.0.1; using {port}." in out
    token = call["env"]["JUPYTER_TOKEN"]
    assert argv[argv.index("JUPYTER_TOKEN") - 1] == "-e", "the token goes by name only"
    assert not any(token in a for a in argv)
    assert f"http://127.0.0.1:{port}/lab?token={token}" in out
    assert f"ssh -L {port}:127.0.0.1:{port} " in out and "on your laptop" in out
    name = argv[argv.index("--name") + 1]
    assert name.startswith("kernellab-") and f"container {name}" in out
    assert f"--ServerApp.port={port}" in argv
    assert "--gpus" not in argv and "--device" not in argv
    assert docker.removed == [name], "Ctrl-C removes the container"
    assert "stopped; container" in out and "removed" in out


def test_render_keeps_the_extras_out_of_a_target_that_has_none_json():
    spec = json.loads((ROOT / "docker/rendered/cu121-a100/kernellab/spec.json").read_text())
    assert spec["extras"] == [] and spec["extras_pip"] == []
