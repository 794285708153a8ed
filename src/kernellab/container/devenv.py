"""Editors and notebooks on a target's image: a Dev Containers file, and JupyterLab.

`invoke devcontainer` writes .devcontainer/<target>/devcontainer.json (VS Code, Codespaces, the
devcontainers CLI): the container kernellab.container.runner.run would start, said in that file's terms:
the repo at /workspace, the persistent caches at /cache, the caller's UID/GID, the GPU in the mode
doctor finds. The file holds this machine's facts (cache folder, UID, GPU flags), so it is not
committed (.gitignore); rerun the task to refresh it.

`invoke notebook` runs JupyterLab (the image's `jupyter` extra) through kernellab.container.runner.run,
published on 127.0.0.1 only, its token passed by environment.
"""
from __future__ import annotations

import errno
import getpass
import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .. import ROOT, cache_root
from ..engine import Engine, Image, resolve_engine
from ..errors import KernellabError, UsageError
from ..image import builder, network
from . import runner
from .runner import CACHE, WORKSPACE

#: Where `invoke devcontainer` writes: one folder per target (VS Code lists each as a configuration).
DEVCONTAINER_DIR = ".devcontainer"
#: Recommended VS Code extensions: C++ and CUDA, Python, notebooks.
EXTENSIONS = (
    "ms-vscode.cpptools",              # C/C++ IntelliSense and debugging (binding.cpp, .cu as CUDA C++)
    "nvidia.nsight-vscode-edition",    # CUDA: syntax, cuda-gdb
    "ms-python.python",
    "ms-python.vscode-pylance",
    "charliermarsh.ruff",              # the repository's linter (`make lint`)
    "ms-python.mypy-type-checker",
    "ms-toolsai.jupyter",
)
#: The image's Python (kernellab images put their venv first on PATH).
VENV_PYTHON = "/opt/venv/bin/python"
#: The extra (docker/matrix.toml [extra.jupyter]) that `invoke notebook` needs in the image.
JUPYTER_EXTRA = "jupyter"


# --------------------------------------------------------------------------- the target's image

def ensure_image(target: str, *, engine: Engine | None = None, out: IO[str] = sys.stdout) -> Image:
    """The target's image (`kernellab:<target>`), built first if this engine does not have it."""
    eng = resolve_engine(engine).require()
    try:
        return builder.image_for_target(target, engine=eng)
    except KernellabError:
        pass
    out.write(f"kernellab:{target} is not built yet; building it first\n")
    spec = builder.resolve_request(target=target, engine=eng)
    builder.build(spec, lock="prefer", ca_certs=network.ca_certificates(), out=out, engine=eng)
    return builder.image_for_target(target, engine=eng)


def image_extras(image: str | Image, *, engine: Engine | None = None) -> tuple[str, ...]:
    """The extras an image was built with (its `kernellab.extras` label; none for older images)."""
    label = resolve_engine(engine).image(image).labels.get("kernellab.extras", "")
    return tuple(e for e in label.split(",") if e)


def require_extra(image: str | Image, target: str, extra: str, *, engine: Engine | None = None) -> None:
    """KernellabError (one sentence saying how to get it) unless image was built with `extra`."""
    if extra not in image_extras(image, engine=engine):
        raise UsageError(f"{image} has no `{extra}` extra; add `extras = [\"{extra}\"]` to [target.{target}] in "
                             f"docker/targets.toml and rebuild with `invoke build-image --target {target}`.")


# --------------------------------------------------------------------------- devcontainer.json

def devcontainer_config(target: str, image: str, *, gpu_mode: str | None, user: tuple[int, int], cache: Path,
                        engine: Engine | None = None) -> dict[str, Any]:
    """devcontainer.json's content for image: what kernellab.container.runner.run would start, in Dev Containers terms.

    kernellab images run as root by default and have no other user, so `updateRemoteUserUID` (which
    renumbers a named non-root user of the image) has nothing to change: the container runs as the
    caller's UID:GID itself (`containerUser`), as every kernellab container does.
    """
    eng = resolve_engine(engine)
    uid, gid = user
    env, gpu_flags = runner.container_env(image, gpu_mode, engine=eng)
    user_flags = eng.user_args(uid, gid)
    extra_user_flags = [a for i, a in enumerate(user_flags)
                        if a != "--user" and (i == 0 or user_flags[i - 1] != "--user")]  # e.g. --userns=keep-id
    run_args = ["--shm-size", "8g", "--hostname", socket.gethostname(), *extra_user_flags,
                *eng.network_args(None), *gpu_flags]
    config: dict[str, Any] = {
        "name": f"kernellab {target}",
        "image": image,
        "workspaceMount": f"source=${{localWorkspaceFolder}},target={WORKSPACE},type=bind",
        "workspaceFolder": WORKSPACE,
        "mounts": [{"source": str(cache.resolve()), "target": CACHE, "type": "bind"}],
        "containerEnv": env,
        "containerUser": f"{uid}:{gid}",
        "updateRemoteUserUID": False,
        "init": eng.has_init(),
        "runArgs": run_args,
        "customizations": {"vscode": {
            "extensions": list(EXTENSIONS),
            "settings": {"python.defaultInterpreterPath": VENV_PYTHON},
        }},
    }
    if not gpu_mode:
        # No GPU here: no GPU flags; a host that has one may still hand it over (Codespaces, the CLI's --gpus).
        config["hostRequirements"] = {"gpu": "optional"}
    return config


def gpu_mode(gpu: bool | str, *, engine: Engine | None = None) -> str | None:
    """The GPU mode asked for: True = the one doctor finds (None without a GPU), False = None, or a mode name."""
    if isinstance(gpu, str):
        if gpu not in runner.gpu_mode_names():
            raise UsageError(f"unknown GPU mode `{gpu}`; use one of {', '.join(runner.gpu_mode_names())}.")
        return gpu
    return runner.best_gpu_mode(resolve_engine(engine)) if gpu else None


def devcontainer_path(target: str, root: Path = ROOT) -> Path:
    return root / DEVCONTAINER_DIR / target / "devcontainer.json"


def write_devcontainer(target: str, image: str, *, gpu: bool | str = True, user: tuple[int, int] | None = None,
                       root: Path = ROOT, engine: Engine | None = None) -> Path:
    """Write .devcontainer/<target>/devcontainer.json under root; return its path.

    gpu: True = the mode doctor finds (none without a GPU), False = none, or a mode name.
    """
    eng = resolve_engine(engine)
    mode = gpu_mode(gpu, engine=eng)
    uid, gid = user or runner.caller_ids()
    cache = cache_root()
    runner.prepare_cache(cache, uid, gid)
    config = devcontainer_config(target, image, gpu_mode=mode, user=(uid, gid), cache=cache, engine=eng)
    header = (
        f"// kernellab dev container for target `{target}`, written by `invoke devcontainer --target {target}` on "
        f"{socket.gethostname()}.\n"
        "// This machine's facts (cache folder, your UID:GID, its GPU flags): not committed; rerun the task to refresh.\n"
    )
    path = devcontainer_path(target, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(header + json.dumps(config, indent=2) + "\n")
    os.replace(tmp, path)
    if os.geteuid() == 0 and (uid, gid) != (0, 0):  # under sudo: the caller's files, not root's
        for p in (path.parent.parent, path.parent, path):
            os.chown(p, uid, gid)
    return path


def read_jsonc(path: Path) -> dict[str, Any]:
    """A devcontainer.json as written here: JSON after `//` comment lines."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("//")]
    return dict(json.loads("\n".join(lines)))


# --------------------------------------------------------------------------- JupyterLab

def free_port(port: int, host: str = "127.0.0.1", tries: int = 100) -> int:
    """port if nothing listens on host:port, else the next free one above it."""
    if not 0 < port < 65536:
        raise UsageError(f"--port must be between 1 and 65535, not {port}.")
    for candidate in range(port, min(port + tries, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, candidate))
            except OSError as e:
                if e.errno in (errno.EADDRINUSE, errno.EACCES):
                    continue
                raise KernellabError(f"cannot check port {candidate} on {host} ({e.strerror}); choose one with --port.") \
                    from None
            return candidate
    raise KernellabError(f"ports {port}-{port + tries - 1} on {host} are all in use; choose another with --port.")


@dataclass(frozen=True)
class Notebook:
    """How to start JupyterLab in a container, and how to reach it."""

    port: int
    token: str
    listen: str          # the address the server binds inside the container
    container: str       # the container's name
    allow_root: bool

    @property
    def argv(self) -> list[str]:
        argv = ["jupyter", "lab", "--no-browser", f"--ServerApp.ip={self.listen}", f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0", f"--ServerApp.root_dir={WORKSPACE}"]
        return [*argv, "--allow-root"] if self.allow_root else argv  # Jupyter refuses uid 0 otherwise (CI)

    @property
    def publish(self) -> list[str]:
        return [f"127.0.0.1:{self.port}:{self.port}"]

    @property
    def env(self) -> dict[str, str]:
        """Passed by name only: the token never appears on a command line (`ps`, `docker inspect` of argv)."""
        return {"JUPYTER_TOKEN": self.token}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/lab?token={self.token}"


def notebook(port: int, *, user: tuple[int, int] | None = None, engine: Engine | None = None) -> Notebook:
    """A Notebook on port (or the next free one above it) with a fresh random token.

    Docker publishes the container's port on 127.0.0.1 only, so the server listens on all of the
    container's own addresses; where the container shares the host's network (rootless Podman),
    it listens on 127.0.0.1 itself.
    """
    eng = resolve_engine(engine)
    uid, _ = user or runner.caller_ids()
    listen = "127.0.0.1" if eng.shares_host_network(None) else "0.0.0.0"
    return Notebook(port=free_port(port), token=secrets.token_hex(24), listen=listen,
                    container=runner.new_name(), allow_root=uid == 0)


def ssh_tunnel(port: int, *, user: str | None = None, host: str | None = None) -> str:
    """The command that brings port on this machine to the same port on a laptop."""
    user = user or os.environ.get("SUDO_USER") or getpass.getuser()
    host = host or socket.gethostname()
    return f"ssh -L {port}:127.0.0.1:{port} {user}@{host}"


def is_remote_session() -> bool:
    """Whether the caller came in over ssh (then the laptop needs the tunnel)."""
    return bool(os.environ.get("SSH_CONNECTION") or os.environ.get("SSH_CLIENT"))
