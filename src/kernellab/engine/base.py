"""The interface every container engine implements, and the command-line parts they share."""
from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from .. import proc
from ..errors import EngineError, UsageError


@dataclass(frozen=True)
class EngineInfo:
    """What `invoke doctor` and the GPU modes need to know about a running engine."""

    name: str
    version: str
    root: str                           # where images live (disk checks)
    rootless: bool
    runtimes: tuple[str, ...] = ()      # OCI runtimes; "nvidia" means --gpus works
    cdi_dirs: tuple[str, ...] = ()      # where CDI specs are read from


@dataclass(frozen=True)
class Image:
    """One image as its engine described it once: the name it was asked by, what it is (its ID), its labels and
    its configured environment. Containers, transfer and the cluster take it instead of inspecting by name again."""

    ref: str
    id: str
    labels: dict[str, str]
    env: dict[str, str]

    def __str__(self) -> str:
        return self.ref


class Engine:
    """The CLI-shaped part both engines share; subclasses say what differs."""

    name = ""
    #: GPU modes this engine can use at all (kernellab.gpu decides which work on this host).
    gpu_modes: tuple[str, ...] = ()

    def __init__(self, cli: str | None = None, host: str | None = None):
        self.cli = cli or self.name
        self.host = host   # another machine's engine (ssh://user@box): every command line reaches it through the CLI

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.cli}{' at ' + self.host if self.host else ''}>"

    @property
    def command(self) -> list[str]:
        """The CLI and the flags that point it at this engine: every command line starts with these."""
        return [self.cli, *(["--host", self.host] if self.host else [])]

    # ------------------------------------------------------------ is it there
    def answers(self) -> bool:
        """Whether the engine answers now (quick; never raises)."""
        raise NotImplementedError

    def problem(self) -> str:
        """Why the engine does not answer, as one sentence with the remedy."""
        raise NotImplementedError

    def require(self) -> Engine:
        if not self.answers():
            raise EngineError(self.problem())
        return self

    def info(self) -> EngineInfo:
        raise NotImplementedError

    # ------------------------------------------------------------ images
    def _run(self, *args: str, check: bool = True, timeout: float | None = None) -> proc.Result:
        if shutil.which(self.cli) is None:
            raise EngineError(self.problem())
        return proc.run([*self.command, *args], check=check, timeout=timeout)

    def inspect(self, ref: str) -> dict[str, Any] | None:
        """`image inspect` of one image, or None when the engine has no such image."""
        r = self._run("image", "inspect", ref, check=False)
        if not r.ok:
            return None
        found = json.loads(r.stdout or "[]")
        return self._normalize(found[0]) if found else None

    def inspect_many(self, refs: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for start in range(0, len(refs), 100):
            batch = list(refs[start:start + 100])
            out += [self._normalize(i) for i in json.loads(self._run("image", "inspect", *batch).stdout or "[]")]
        return out

    def _normalize(self, image: dict[str, Any]) -> dict[str, Any]:
        """Docker's inspect shape: Id as "sha256:<hex>"."""
        if image.get("Id") and not str(image["Id"]).startswith("sha256:"):
            image = {**image, "Id": "sha256:" + image["Id"]}
        return image

    def find_image(self, ref: str) -> Image | None:
        """The image `ref` names, inspected once, or None when the engine has no such image."""
        found = self.inspect(ref)
        if found is None:
            return None
        config = found.get("Config") or {}
        env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
        return Image(ref, str(found["Id"]), dict(config.get("Labels") or {}), env)

    def image(self, ref: str | Image) -> Image:
        """An Image as it is, or the one `ref` names (inspected once); EngineError when the engine has none."""
        if isinstance(ref, Image):
            return ref
        found = self.find_image(ref)
        if found is None:
            raise EngineError(self._no_image(ref))
        return found

    def exists(self, ref: str) -> bool:
        return self._run("image", "inspect", ref, check=False).ok

    def must_inspect(self, ref: str) -> dict[str, Any]:
        image = self.inspect(ref)
        if image is None:
            raise EngineError(self._no_image(ref))
        return image

    def _no_image(self, ref: str) -> str:
        return (f"the {self.name} engine has no image {ref}; build it (`invoke build-image`) or load it "
                f"(`invoke import-image DIR`), then check `{self.name} images`.")

    def image_id(self, ref: str) -> str:
        return str(self.must_inspect(ref)["Id"])

    def labels(self, ref: str) -> dict[str, str]:
        return dict((self.must_inspect(ref).get("Config") or {}).get("Labels") or {})

    def env(self, ref: str) -> dict[str, str]:
        """The image's configured environment (Config.Env) as a dict."""
        return self.image(ref).env

    def repo_digests(self, ref: str) -> list[str]:
        return list(self.must_inspect(ref).get("RepoDigests") or [])

    def image_ids(self) -> list[str]:
        """Every image the engine holds, intermediate ones included."""
        ids = self._run("image", "ls", "-aq", "--no-trunc").stdout.split()
        return sorted({i if i.startswith("sha256:") else f"sha256:{i}" for i in ids})

    def tag(self, ref: str, new: str) -> None:
        self._run("tag", ref, new)

    def untag(self, ref: str) -> None:
        """Remove a tag, keeping the image if other tags or children use it; never fails."""
        self._run("rmi", ref, check=False)

    @contextlib.contextmanager
    def staging(self) -> Iterator[str]:
        """A name of its own for an image while it is being made, dropped on the way out (the name, not the image).
        An untagged image is dangling: a `docker image prune` meanwhile, or another build of the same image
        dropping its own name, would delete it between the build and its use."""
        ref = f"kernellab-staging:{uuid.uuid4().hex[:12]}"
        try:
            yield ref
        finally:
            self.untag(ref)

    def remove_image(self, ref: str) -> None:
        """Delete an image and every tag of it (an ID, or a tag); never fails."""
        self._run("rmi", "-f", ref, check=False)

    def builder(self) -> list[str]:
        """The command that builds images (doctor shows it)."""
        return [*self.command, "build"]

    def pull(self, ref: str, out: IO[str]) -> None:
        proc.run([*self.command, "pull", ref], stream=True, out=out)

    @contextlib.contextmanager
    def save(self, refs: Sequence[str]) -> Iterator[IO[bytes]]:
        """The `docker save` archive of refs as a binary stream (docker-archive layout)."""
        with proc.pipe_from(self.save_argv(refs)) as stream:
            yield stream

    def save_argv(self, refs: Sequence[str]) -> list[str]:
        return [*self.command, "save", *refs]

    def load_argv(self) -> list[str]:
        """The command that loads a save archive from its standard input."""
        return [*self.command, "load"]

    @contextlib.contextmanager
    def load(self) -> Iterator[proc.Pipe]:
        """A pipe to write a save archive into; the engine loads it when the block ends."""
        with proc.pipe_to(self.load_argv()) as pipe:
            yield pipe

    @contextlib.contextmanager
    def export_rootfs(self, ref: str) -> Iterator[IO[bytes]]:
        """The image's root file system as one tar stream (its layers applied, whiteouts honoured), read from a
        container that is created for it and removed afterwards."""
        container = self._run("create", ref, "true", timeout=300).stdout.strip()
        try:
            with proc.pipe_from([*self.command, "export", container]) as src:
                yield src
        finally:
            self._run("rm", "-f", container, check=False, timeout=120)

    @contextlib.contextmanager
    def import_rootfs(self, tag: str) -> Iterator[proc.Pipe]:
        """A pipe to write a root file system tar into; it becomes image `tag`."""
        with proc.pipe_to([*self.command, "import", "-", tag]) as pipe:
            yield pipe

    # ------------------------------------------------------------ command lines
    def build_argv(self, context: Path, *, iidfile: Path, tags: Sequence[str] = (), network: str = "host",
                   secrets: dict[str, Path] | None = None, build_args: Sequence[str] = (),
                   no_cache: bool = False, target: str | None = None) -> tuple[list[str], dict[str, str]]:
        """The command line (and extra environment) that builds `context` with its Dockerfile; target: the stage
        of a multi-stage Dockerfile to build (default: the last)."""
        raise NotImplementedError

    def probe_argv(self, image: str, command: Sequence[str], *, entrypoint: str,
                   mounts: Sequence[str] = ()) -> list[str]:
        """A throwaway container that reads a fact out of an image: no network, no init, as root (a file, a
        package list, what its Python says)."""
        return self.run_argv(image, command, user=(0, 0), network="none", entrypoint=entrypoint, mounts=mounts,
                             init=False, shm_size=None)

    def read_file(self, image: str, path: str, timeout: float = 120) -> proc.Result:
        """A file of an image, read through a throwaway container (`cat`); the result says whether there was one."""
        return proc.run(self.probe_argv(image, [path], entrypoint="cat"), check=False, timeout=timeout)

    def run_argv(self, image: str, command: Sequence[str] = (), *, user: tuple[int, int], mounts: Sequence[str] = (),
                 env: dict[str, str] | None = None, pass_env: Sequence[str] = (), workdir: str | None = None,
                 network: str | None = None, name: str | None = None, interactive: bool = False, tty: bool = False,
                 init: bool = True, shm_size: str | None = "8g", extra: Sequence[str] = (),
                 entrypoint: str | None = None, remove: bool = True, hostname: str | None = None,
                 publish: Sequence[str] = ()) -> list[str]:
        """`run` for one container: mounts are "host:container[:ro]", pass_env names host variables,
        publish is "host address:host port:container port" (nothing to publish on the host's network)."""
        argv = [*self.command, "run"]
        if remove:
            argv.append("--rm")
        if init:
            argv.append("--init")
        if shm_size:
            argv += ["--shm-size", shm_size]
        argv += self.user_args(*user)
        for m in mounts:
            argv += ["-v", m]
        if workdir:
            argv += ["-w", workdir]
        if interactive:
            argv += ["-it"] if tty else ["-i"]
        argv += self.network_args(network)
        if not self.shares_host_network(network):
            for p in publish:
                argv += ["-p", p]
        if name:
            argv += ["--name", name]
        if hostname:
            argv += ["--hostname", hostname]
        if entrypoint is not None:
            argv += ["--entrypoint", entrypoint]
        for k in pass_env:
            argv += ["-e", k]
        for k, v in (env or {}).items():
            argv += ["-e", f"{k}={v}"]
        return [*argv, *extra, image, *command]

    def has_init(self) -> bool:
        """Whether `run --init` works (a tiny init as PID 1: signals reach the command, zombies are reaped)."""
        return True

    def user_args(self, uid: int, gid: int) -> list[str]:
        return ["--user", f"{uid}:{gid}"]

    def network_args(self, network: str | None) -> list[str]:
        return ["--network", network] if network else []

    def shares_host_network(self, network: str | None) -> bool:
        """Whether a container run with `network` uses the host's network (its ports are the host's: nothing to publish)."""
        return network == "host"

    def remove_container(self, name: str) -> None:
        self._run("rm", "-f", name, check=False)

    def gpu_args(self, mode: str, host_libs: dict[str, str], nodes: Sequence[str],
                 gpus: Sequence[str] | None = None) -> tuple[list[str], dict[str, str]]:
        """Flags and environment that attach the GPUs in `mode` (see kernellab.gpu.MODES): the host
        indices gpus, or every GPU for None (in devices mode, `nodes` are already the chosen ones)."""
        if mode not in self.gpu_modes:
            raise UsageError(f"the {self.name} engine cannot attach GPUs in mode `{mode}`; use one of "
                                 f"{', '.join(self.gpu_modes)} (`invoke doctor` shows which work here).")
        if gpus is not None and not gpus:
            raise ValueError("no GPU selected: run the container without a GPU mode instead")
        if mode == "nvidia":
            return ["--gpus", gpus_flag(gpus)], {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
        if mode == "cdi":
            names = gpus if gpus is not None else ["all"]
            return [flag for g in names for flag in ("--device", f"nvidia.com/gpu={g}")], {}
        args: list[str] = []
        for node in nodes:
            args += ["--device", node]
        for host, inside in host_libs.items():
            args += ["-v", f"{host}:{inside}:ro"]
        return args, {}


def gpus_flag(gpus: Sequence[str] | None) -> str:
    """The value of docker's `--gpus` for host indices gpus (None: all).

    Docker reads the value as one CSV record, so `device=0,1` would be two fields; several GPUs are
    quoted as one (`--gpus '"device=0,1"'` in a shell, the string `"device=0,1"` in an argv).
    """
    if gpus is None:
        return "all"
    return f"device={gpus[0]}" if len(gpus) == 1 else f'"device={",".join(gpus)}"'
