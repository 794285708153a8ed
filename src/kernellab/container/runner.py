"""The one way kernellab runs a container: repo at /workspace, persistent caches, the caller's
UID/GID (nothing in mounted folders becomes root-owned), the GPU in the best available mode.

`invoke shell`, `invoke test` and `invoke bench` all go through run(). What run() needs to know about the machine
the container runs on (its user, GPUs and best GPU mode, where /workspace and /cache come from) it asks a Host:
LOCAL is this machine; kernellab.remote's SshHost is another one reached by ssh.
"""
from __future__ import annotations

import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Protocol, Sequence

from .. import ROOT, cache_root, gpu, proc
from ..engine import Engine, Image, resolve_engine
from ..errors import KernellabError, UsageError
from ..gpu import selected_gpus  # run()'s `gpu` argument hides the module there

WORKSPACE = "/workspace"
CACHE = "/cache"
#: Persistent caches (torch extensions, ccache, triton, pip) survive containers here.
CACHE_SUBDIRS = ("torch_extensions", "ccache", "triton", "pip", "home")


def caller_ids() -> tuple[int, int]:
    """The invoking user's UID/GID, also under sudo (so files stay theirs)."""
    uid = int(os.environ.get("SUDO_UID", os.getuid()))
    gid = int(os.environ.get("SUDO_GID", os.getgid()))
    return uid, gid


def prepare_cache(path: Path, uid: int, gid: int) -> None:
    """Make the cache folder and its subfolders, owned by uid:gid (containers run as them)."""
    for sub in ("", *CACHE_SUBDIRS):
        d = path / sub
        d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0 and (d.stat().st_uid, d.stat().st_gid) != (uid, gid):
            os.chown(d, uid, gid)


class Host(Protocol):
    """The machine a container runs on: what run() and a place (kernellab.places.Container) need to know of it."""

    @property
    def engine(self) -> Engine | None: ...                  # its engine (None: the one this process chose)
    def user(self) -> tuple[int, int]: ...                 # UID/GID the container runs as
    def hostname(self) -> str: ...                          # the container's hostname (results record it)
    def workspace(self) -> str: ...                         # the folder mounted at /workspace
    def cache(self, uid: int, gid: int) -> str: ...         # the folder mounted at /cache, made and owned by uid:gid
    def gpus(self) -> list[gpu.HostGpu]: ...
    def best_gpu_mode(self, engine: Engine) -> str | None: ...
    def selected_gpus(self, gpu_index: str | int | None) -> list[str] | None: ...
    def driver(self) -> tuple[list[str], dict[str, str]]: ...  # device nodes, driver files (devices mode)
    def image(self, image: str | Image) -> str | Image: ...  # this machine's image as the host has it
    def folder(self, path: Path) -> str: ...               # this machine's folder as the host has it
    def mount(self, spec: str) -> str: ...                  # "here:inside[:ro]" as the host mounts it
    def tool_mounts(self, names: Sequence[str]) -> list[str]: ...  # its installs of NVIDIA's tools
    def bring_back(self) -> None: ...                       # what the host wrote in folders of this machine


class LocalHost:
    """This machine: the checkout, ~/.cache/kernellab (or $KERNELLAB_CACHE), its GPUs, the caller's UID."""

    engine: Engine | None = None

    def user(self) -> tuple[int, int]:
        return caller_ids()

    def hostname(self) -> str:
        return socket.gethostname()

    def workspace(self) -> str:
        return str(ROOT.resolve())

    def cache(self, uid: int, gid: int) -> str:
        path = cache_root()
        prepare_cache(path, uid, gid)
        return str(path.resolve())

    def gpus(self) -> list[gpu.HostGpu]:
        return gpu.host_gpus()

    def best_gpu_mode(self, engine: Engine) -> str | None:
        return best_gpu_mode(engine)

    def selected_gpus(self, gpu_index: str | int | None) -> list[str] | None:
        # Without --gpu-index the environment chooses, so a Slurm task (SLURM_JOB_GPUS) or a shell with
        # CUDA_VISIBLE_DEVICES hands its container only its own GPUs, not every GPU of the node.
        return selected_gpus(gpu_index)

    def driver(self) -> tuple[list[str], dict[str, str]]:
        return gpu.device_nodes(), gpu.driver_files()

    def image(self, image: str | Image) -> str | Image:
        return image

    def folder(self, path: Path) -> str:
        return str(path.resolve())

    def mount(self, spec: str) -> str:
        return spec

    def tool_mounts(self, names: Sequence[str]) -> list[str]:
        from ..nsight import tools

        return tools.mounts(tuple(names))

    def bring_back(self) -> None:
        pass


LOCAL: Host = LocalHost()


def best_gpu_mode(engine: Engine | None = None) -> str | None:
    """The best way to hand GPUs to containers here, or None when there is no GPU to hand."""
    if not gpu.host_gpus():
        return None
    eng = resolve_engine(engine)
    try:
        info = eng.info()
    except KernellabError:  # no engine, or one that does not answer `info`: modes from the host alone
        info = None
    modes = gpu.available_modes(info, eng.gpu_modes)
    return modes[0] if modes else None


def run_argv(
    image: str | Image,
    command: Sequence[str] = (),
    *,
    interactive: bool = False,
    gpu_mode: str | None = None,
    gpus: Sequence[str] | None = None,
    user: tuple[int, int] | None = None,
    repo: Path | str = ROOT,
    cache: Path | str | None = None,
    env: dict[str, str] | None = None,
    network: str | None = None,
    name: str | None = None,
    publish: Sequence[str] = (),
    pass_env: Sequence[str] = (),
    mounts: Sequence[str] = (),
    engine: Engine | None = None,
    hostname: str | None = None,
    host: Host | None = None,
) -> list[str]:
    """The engine's `run` command line for one container (pure apart from inspecting the image).

    gpus: the host GPU indices gpu_mode attaches (kernellab.gpu.selected_gpus), None for all.
    publish: "127.0.0.1:8888:8888" (host address:host port:container port). pass_env: more host
    variables passed by name only (their values never appear on the command line). mounts: more
    "host:container[:ro]" beside the repository and the cache.
    """
    eng = resolve_engine(engine)
    uid, gid = user or caller_ids()
    cache = cache or cache_root()
    # A local path is resolved here; another host's (a str) is already that host's absolute path.
    repo, cache = (str(p.resolve()) if isinstance(p, Path) else p for p in (repo, cache))
    # kernellab's own switches (KERNELLAB_OPS, KERNELLAB_REQUIRE_GPU, ...) reach the container too,
    # by name only: the engine reads the values from its environment, so `ps` never shows them.
    names = [k for k in sorted(os.environ)
             if k.startswith("KERNELLAB_") and k not in ("KERNELLAB_CACHE", "KERNELLAB_IMAGE_ID", "KERNELLAB_ENGINE")]
    img = eng.image(image)
    full_env, extra = container_env(img, gpu_mode, gpus=gpus, engine=eng, host=host)
    full_env["KERNELLAB_IMAGE_ID"] = img.id
    full_env.update(env or {})
    # The host's name inside too: benchmark results record it, and compare tells machines apart by it.
    return eng.run_argv(img.ref, command, user=(uid, gid), workdir=WORKSPACE, network=network, name=name,
                        hostname=hostname or socket.gethostname(),
                        mounts=(f"{repo}:{WORKSPACE}", f"{cache}:{CACHE}", *mounts),
                        interactive=interactive, tty=interactive and sys.stdin.isatty(), publish=publish,
                        pass_env=list(dict.fromkeys([*names, *pass_env])), env=full_env, extra=extra)


def container_env(image: str | Image, gpu_mode: str | None, *, gpus: Sequence[str] | None = None,
                  engine: Engine | None = None, host: Host | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment every kernellab container gets (home and caches under /cache, PYTHONPATH, the
    GPU's), and the engine's flags that attach the GPUs in gpu_mode (none for None): the host indices
    gpus, or all of them for None."""
    eng = resolve_engine(engine)
    env = {"HOME": f"{CACHE}/home", "USER": os.environ.get("USER", "kernellab") or "kernellab",
           "KERNELLAB_CACHE": CACHE, "PYTHONPATH": f"{WORKSPACE}/src", "PIP_CACHE_DIR": f"{CACHE}/pip"}
    flags: list[str] = []
    if gpu_mode:
        flags, gpu_env = gpu.container_gpu_args(eng, gpu_mode, gpus, driver=host.driver if host else None)
        image_env = eng.image(image).env
        for k, v in gpu_env.items():
            # Library and binary paths are appended to the image's own, never replace them.
            if k in ("PATH", "LD_LIBRARY_PATH") and image_env.get(k):
                v = f"{image_env[k]}:{v}"
            env[k] = v
    return env, flags


def run(image: str | Image, command: Sequence[str] = (), *, gpu: bool | str = True, interactive: bool = False,
        user: tuple[int, int] | None = None, env: dict[str, str] | None = None, network: str | None = None,
        repo: Path | None = None, publish: Sequence[str] = (), secret_env: dict[str, str] | None = None,
        name: str | None = None, mounts: Sequence[str] = (), engine: Engine | None = None,
        gpu_index: str | int | None = None, out: proc.Writer | None = None, host: Host = LOCAL) -> int:
    """Run command in a container of image, streaming its output; return its exit code.

    gpu: True = the best mode found (none if this machine has no GPU), False = no GPU,
    or a mode name ("nvidia", "cdi", "devices") to force one.
    gpu_index: the host GPUs to attach ("1", "0,2"); None: the environment's selection (Slurm's GPUs,
    CUDA_VISIBLE_DEVICES; kernellab.gpu.selected_gpus), else every GPU.
    publish: ports as "127.0.0.1:HOST:CONTAINER". secret_env: variables the container gets by name
    only (a token): the engine reads their values from its own environment, never from argv.
    out: where the output goes instead of this terminal (stdout and stderr together; no stdin).
    host: the machine the engine runs containers on (its user, GPUs, workspace and cache); repo: another
    folder of it at /workspace (a cluster node's snapshot).
    Ctrl-C (or the client dying with exit 130) removes the container.
    """
    eng = resolve_engine(engine).require()
    found = image if isinstance(image, Image) else eng.find_image(image)
    if found is None:
        raise KernellabError(f"image {image} does not exist in {eng.name}; build it with `invoke build-image` first.")
    mode = (host.best_gpu_mode(eng) if gpu is True else None) if not isinstance(gpu, str) else gpu
    if isinstance(gpu, str) and gpu not in gpu_mode_names():
        raise UsageError(f"unknown GPU mode `{gpu}`; use one of {', '.join(gpu_mode_names())}.")
    if gpu is False and gpu_index is not None:
        raise UsageError(f"--gpu-index {gpu_index} picks GPUs to attach, and --gpu-mode none attaches none; "
                             "drop one of the two.")
    gpus = host.selected_gpus(gpu_index) if mode or gpu_index is not None else None
    if gpus == []:  # CUDA_VISIBLE_DEVICES hides every GPU from this process: the container gets none either
        mode = None
    uid, gid = user or host.user()
    name = name or new_name()
    argv = run_argv(found, command, interactive=interactive, gpu_mode=mode, gpus=gpus, user=(uid, gid),
                    cache=host.cache(uid, gid), env=env, network=network, repo=repo or host.workspace(),
                    name=name, publish=publish, pass_env=tuple(secret_env or {}), mounts=mounts,
                    engine=eng, hostname=host.hostname(), host=host)
    if out is not None:
        try:
            code = proc.run(argv, stream=True, out=out, check=False, env=secret_env).returncode
        except KeyboardInterrupt:
            eng.remove_container(name)
            raise
    else:
        code = proc.call(argv, env=secret_env)
    if code == 130:  # Ctrl-C: the client may be gone while the container runs on, holding the GPU
        eng.remove_container(name)
    return code


def new_name() -> str:
    """A fresh container name (`kernellab-<12 hex>`)."""
    return f"kernellab-{uuid.uuid4().hex[:12]}"


def gpu_mode_names() -> tuple[str, ...]:
    return gpu.MODES


def gpu_choice(gpu_mode: str | None) -> bool | str:
    """--gpu-mode as run() takes it: True (the best mode), False ("none"), or a mode."""
    if gpu_mode is None:
        return True
    return False if gpu_mode == "none" else gpu_mode
