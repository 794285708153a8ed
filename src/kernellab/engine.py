"""Container engines behind one interface: Docker and (rootless) Podman.

Every engine call kernellab makes (inspect, save/load, import, tag, build and run command lines,
GPU flags) goes through an `Engine`. Which one: `--engine`, invoke config `kernellab.engine`,
or KERNELLAB_ENGINE; else the first of docker, podman that answers. Library functions take an
`engine=` argument, so tests can pass a fake object instead of patching private functions.

Builds and runs are command lines for the engine's CLI (the Docker SDK has no BuildKit, and
Podman has no daemon to talk to); Docker's liveness probe and `info` use the Docker SDK.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from . import proc
from .errors import CommandError, DockerError, EngineError, KernellabError

ENGINES = ("docker", "podman")
#: Where Podman looks for the init process that `--init` starts.
CATATONIT = ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit", "/usr/local/libexec/podman/catatonit")


@dataclass(frozen=True)
class EngineInfo:
    """What `invoke doctor` and the GPU modes need to know about a running engine."""

    name: str
    version: str
    root: str                           # where images live (disk checks)
    rootless: bool
    runtimes: tuple[str, ...] = ()      # OCI runtimes; "nvidia" means --gpus works
    cdi_dirs: tuple[str, ...] = ()      # where CDI specs are read from
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


class Engine:
    """The CLI-shaped part both engines share; subclasses say what differs."""

    name = ""
    #: GPU modes this engine can use at all (kernellab.gpu decides which work on this host).
    gpu_modes: tuple[str, ...] = ()

    def __init__(self, cli: str | None = None):
        self.cli = cli or self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.cli}>"

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
        return proc.run([self.cli, *args], check=check, timeout=timeout)

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

    def exists(self, ref: str) -> bool:
        return self._run("image", "inspect", ref, check=False).ok

    def must_inspect(self, ref: str) -> dict[str, Any]:
        image = self.inspect(ref)
        if image is None:
            raise EngineError(f"the {self.name} engine has no image {ref}; build it (`invoke build-image`) or "
                              f"load it (`invoke import-image DIR`), then check `{self.name} images`.")
        return image

    def image_id(self, ref: str) -> str:
        return str(self.must_inspect(ref)["Id"])

    def labels(self, ref: str) -> dict[str, str]:
        return dict((self.must_inspect(ref).get("Config") or {}).get("Labels") or {})

    def env(self, ref: str) -> dict[str, str]:
        """The image's configured environment (Config.Env) as a dict."""
        env: dict[str, str] = {}
        for item in (self.must_inspect(ref).get("Config") or {}).get("Env") or []:
            k, _, v = item.partition("=")
            env[k] = v
        return env

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

    def pull(self, ref: str, out: IO[str]) -> None:
        proc.run([self.cli, "pull", ref], stream=True, out=out)

    @contextlib.contextmanager
    def save(self, refs: Sequence[str]) -> Iterator[IO[bytes]]:
        """The `docker save` archive of refs as a binary stream (docker-archive layout)."""
        with proc.pipe_from(self.save_argv(refs)) as stream:
            yield stream

    def save_argv(self, refs: Sequence[str]) -> list[str]:
        return [self.cli, "save", *refs]

    @contextlib.contextmanager
    def load(self) -> Iterator[proc.Pipe]:
        """A pipe to write a save archive into; the engine loads it when the block ends."""
        with proc.pipe_to([self.cli, "load"]) as pipe:
            yield pipe

    @contextlib.contextmanager
    def import_rootfs(self, tag: str) -> Iterator[proc.Pipe]:
        """A pipe to write a root file system tar into; it becomes image `tag`."""
        with proc.pipe_to([self.cli, "import", "-", tag]) as pipe:
            yield pipe

    # ------------------------------------------------------------ command lines
    def build_argv(self, context: Path, *, iidfile: Path, tags: Sequence[str] = (), network: str = "host",
                   secrets: dict[str, Path] | None = None, build_args: Sequence[str] = (),
                   no_cache: bool = False) -> tuple[list[str], dict[str, str]]:
        """The command line (and extra environment) that builds `context` with its Dockerfile."""
        raise NotImplementedError

    def run_argv(self, image: str, command: Sequence[str] = (), *, user: tuple[int, int], mounts: Sequence[str] = (),
                 env: dict[str, str] | None = None, pass_env: Sequence[str] = (), workdir: str | None = None,
                 network: str | None = None, name: str | None = None, interactive: bool = False, tty: bool = False,
                 init: bool = True, shm_size: str | None = "8g", extra: Sequence[str] = (),
                 entrypoint: str | None = None, remove: bool = True) -> list[str]:
        """`run` for one container: mounts are "host:container[:ro]", pass_env names host variables."""
        argv = [self.cli, "run"]
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
        if name:
            argv += ["--name", name]
        if entrypoint is not None:
            argv += ["--entrypoint", entrypoint]
        for k in pass_env:
            argv += ["-e", k]
        for k, v in (env or {}).items():
            argv += ["-e", f"{k}={v}"]
        return [*argv, *extra, image, *command]

    def user_args(self, uid: int, gid: int) -> list[str]:
        return ["--user", f"{uid}:{gid}"]

    def network_args(self, network: str | None) -> list[str]:
        return ["--network", network] if network else []

    def remove_container(self, name: str) -> None:
        self._run("rm", "-f", name, check=False)

    def gpu_args(self, mode: str, host_libs: dict[str, str], nodes: Sequence[str], gpus: str = "all"
                 ) -> tuple[list[str], dict[str, str]]:
        """Flags and environment that attach the GPUs in `mode` (see kernellab.gpu.MODES)."""
        if mode not in self.gpu_modes:
            raise KernellabError(f"the {self.name} engine cannot attach GPUs in mode `{mode}`; use one of "
                                 f"{', '.join(self.gpu_modes)} (`invoke doctor` shows which work here).")
        if mode == "nvidia":
            return ["--gpus", gpus], {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
        if mode == "cdi":
            return ["--device", f"nvidia.com/gpu={gpus}"], {}
        args: list[str] = []
        for node in nodes:
            args += ["--device", node]
        for host, inside in host_libs.items():
            args += ["-v", f"{host}:{inside}:ro"]
        return args, {}


class Docker(Engine):
    name = "docker"
    gpu_modes = ("nvidia", "cdi", "devices")

    def _client(self, timeout: int = 20) -> Any:
        try:
            import docker
        except ImportError:
            raise DockerError("the docker Python package is missing; run `make setup` (or `pip install docker`).") \
                from None
        return docker.from_env(timeout=timeout)  # type: ignore[attr-defined]

    def answers(self) -> bool:
        try:
            self._client().ping()
            return True
        except KernellabError:
            raise
        except Exception:
            return False

    def problem(self) -> str:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if shutil.which(self.cli) is None:
            return "the docker CLI is not installed; run `make engine` (installs docker.io) or use `--engine podman`."
        return (f"cannot reach a Docker engine at {where}; start one (`make engine`, or `sudo systemctl start "
                f"docker`), or use `--engine podman`, and check with `invoke doctor`.")

    def info(self) -> EngineInfo:
        try:
            client = self._client()
            raw, version = client.info(), client.version()
        except KernellabError:
            raise
        except Exception as e:
            raise EngineError(f"{self.problem()[:-1]} ({type(e).__name__}).") from None
        return EngineInfo("docker", str(version.get("Version", "")), str(raw.get("DockerRootDir", "/var/lib/docker")),
                          "rootless" in " ".join(raw.get("SecurityOptions") or []),
                          tuple(sorted((raw.get("Runtimes") or {}).keys())), tuple(raw.get("CDISpecDirs") or ()), raw)

    def builder(self) -> list[str]:
        """A docker CLI that builds with BuildKit: buildx if present, else a client with it built in."""
        candidates = list(dict.fromkeys(p for p in (shutil.which(self.cli), "/usr/bin/docker") if p and os.path.exists(p)))
        if not candidates:
            raise EngineError("the docker CLI is not installed; run `make engine` or install docker.io.")
        for cli in candidates:
            if proc.run([cli, "buildx", "version"], check=False).ok:
                return [cli, "buildx", "build", "--load"]
        for cli in candidates:
            version = proc.run([cli, "version", "--format", "{{.Client.Version}}"], check=False).stdout.strip()
            major = re.match(r"(\d+)", version)
            if major and int(major.group(1)) < 23:  # before 23, `docker build` had BuildKit built in
                return [cli, "build"]
        raise EngineError("no docker CLI here can build with BuildKit: install the buildx plugin "
                          "(docker-buildx) or Debian's docker.io client.")

    def build_argv(self, context: Path, *, iidfile: Path, tags: Sequence[str] = (), network: str = "host",
                   secrets: dict[str, Path] | None = None, build_args: Sequence[str] = (),
                   no_cache: bool = False) -> tuple[list[str], dict[str, str]]:
        argv = [*self.builder(), "--network", network, "--progress", "plain", "--iidfile", str(iidfile)]
        for sid, src in (secrets or {}).items():
            argv += ["--secret", f"id={sid},src={src}"]
        for t in tags:
            argv += ["-t", t]
        argv += [*build_args, *(["--no-cache"] if no_cache else []), str(context)]
        return argv, {"DOCKER_BUILDKIT": "1"}

    def untag(self, ref: str) -> None:
        self._run("rmi", "--no-prune", ref, check=False)


class Podman(Engine):
    """Rootless Podman, as shared machines and clusters run it.

    Differences that matter here: no daemon (every call is the CLI); `--userns=keep-id` so the
    caller's UID inside is the caller's UID outside (files in mounts stay theirs); host networking
    for builds and networked runs (rootless slirp4netns needs /dev/net/tun, often missing);
    no `--gpus` (CDI or device nodes instead).
    """

    name = "podman"
    gpu_modes = ("cdi", "devices")

    def answers(self) -> bool:
        if shutil.which(self.cli) is None:
            return False
        try:
            return proc.run([self.cli, "info", "--format", "{{.Host.OCIRuntime.Name}}"], check=False, timeout=60).ok
        except KernellabError:
            return False

    def problem(self) -> str:
        if shutil.which(self.cli) is None:
            return "podman is not installed; `sudo apt-get install podman uidmap` (rootless needs /etc/subuid entries), " \
                   "or use `--engine docker`."
        r = proc.run([self.cli, "info"], check=False, timeout=60)
        why = (r.stderr.strip().splitlines() or ["no output"])[-1][:200]
        hint = ""
        if os.geteuid() == 0:
            hint = " kernellab runs Podman rootless: run as a normal user with /etc/subuid and /etc/subgid entries;"
        return f"podman does not answer (`podman info`: {why});{hint} check `podman info`, or use `--engine docker`."

    def info(self) -> EngineInfo:
        r = proc.run([self.cli, "info", "--format", "json"], check=False, timeout=60)
        if not r.ok:
            raise EngineError(self.problem())
        raw = json.loads(r.stdout)
        host, store = raw.get("host") or {}, raw.get("store") or {}
        version = (raw.get("version") or {}).get("Version", "")
        cdi = tuple(d for d in ("/etc/cdi", "/var/run/cdi") if os.path.isdir(d))
        runtime = (host.get("ociRuntime") or {}).get("name")
        return EngineInfo("podman", str(version), str(store.get("graphRoot", "")),
                          bool((host.get("security") or {}).get("rootless")), (runtime,) if runtime else (), cdi, raw)

    def build_argv(self, context: Path, *, iidfile: Path, tags: Sequence[str] = (), network: str = "host",
                   secrets: dict[str, Path] | None = None, build_args: Sequence[str] = (),
                   no_cache: bool = False) -> tuple[list[str], dict[str, str]]:
        # --format docker keeps LABELs and the Dockerfile's metadata exactly as Docker would.
        argv = [self.cli, "build", "--format", "docker", "--layers", "--network", network, "--iidfile", str(iidfile)]
        for sid, src in (secrets or {}).items():
            argv += ["--secret", f"id={sid},src={src}"]
        for t in tags:
            argv += ["-t", t]
        argv += [*build_args, *(["--no-cache"] if no_cache else []), str(context)]
        return argv, {}

    def save_argv(self, refs: Sequence[str]) -> list[str]:
        return [self.cli, "save", "--format", "docker-archive", *(["-m"] if len(refs) > 1 else []), *refs]

    def run_argv(self, image: str, command: Sequence[str] = (), **kw: Any) -> list[str]:
        # --init needs Podman's catatonit (a package of its own on Debian); without it, run without.
        if kw.get("init", True) and not any(os.path.exists(p) for p in CATATONIT):
            kw["init"] = False
        return super().run_argv(image, command, **kw)

    def user_args(self, uid: int, gid: int) -> list[str]:
        if os.geteuid() != 0:  # rootless: the caller's UID maps to itself inside, not to root
            return ["--userns=keep-id", "--user", f"{uid}:{gid}"]
        return ["--user", f"{uid}:{gid}"]

    def network_args(self, network: str | None) -> list[str]:
        return ["--network", network or "host"]

    def pull(self, ref: str, out: IO[str]) -> None:
        proc.run([self.cli, "pull", f"docker.io/{ref}" if "/" in ref and "." not in ref.split("/")[0] else ref],
                 stream=True, out=out)


_REGISTRY: dict[str, type[Engine]] = {"docker": Docker, "podman": Podman}
_chosen: str | None = None
_instances: dict[str, Engine] = {}


def select(name: str | None) -> None:
    """Choose the engine for this process (the task layer calls it with --engine or invoke config)."""
    global _chosen
    if name and name not in _REGISTRY:
        raise EngineError(f"unknown engine `{name}`; use one of {', '.join(ENGINES)}.")
    _chosen = name or None


def by_name(name: str) -> Engine:
    if name not in _REGISTRY:
        raise EngineError(f"unknown engine `{name}`; use one of {', '.join(ENGINES)} (KERNELLAB_ENGINE or --engine).")
    if name not in _instances:
        _instances[name] = _REGISTRY[name]()
    return _instances[name]


def current() -> Engine:
    """The selected engine, else KERNELLAB_ENGINE's, else the first that answers (docker, then podman)."""
    name = _chosen or os.environ.get("KERNELLAB_ENGINE") or None
    if name:
        return by_name(name)
    for candidate in ENGINES:
        if by_name(candidate).answers():
            return by_name(candidate)
    return by_name("docker")  # nothing answers: its problem() names the remedy


def answering() -> list[Engine]:
    """Every engine that answers here (doctor lists them)."""
    return [by_name(n) for n in ENGINES if by_name(n).answers()]


def resolve_engine(engine: Engine | None) -> Engine:
    return engine if engine is not None else current()


__all__ = ["ENGINES", "CommandError", "Docker", "Engine", "EngineInfo", "Podman", "answering", "by_name", "current",
           "resolve_engine", "select"]
