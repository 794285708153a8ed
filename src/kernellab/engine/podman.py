"""Rootless Podman: no daemon, every call is the CLI."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import IO, Any, Sequence

from .. import proc
from ..errors import EngineError, KernellabError
from .base import Engine, EngineInfo

#: Where Podman looks for the init process that `--init` starts.
CATATONIT = ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit", "/usr/local/libexec/podman/catatonit")


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
            return proc.run([*self.command, "info", "--format", "{{.Host.OCIRuntime.Name}}"], check=False, timeout=60).ok
        except KernellabError:
            return False

    def problem(self) -> str:
        if shutil.which(self.cli) is None:
            return "podman is not installed; `sudo apt-get install podman uidmap catatonit` (rootless needs /etc/subuid entries), " \
                   "or use `--engine docker`."
        return self._not_answering(proc.run([*self.command, "info"], check=False, timeout=60))

    def _not_answering(self, r: proc.Result) -> str:
        """The sentence for a `podman info` that failed with r."""
        why = (r.stderr.strip().splitlines() or ["no output"])[-1][:200]
        hint = ""
        if os.geteuid() == 0:
            hint = " kernellab runs Podman rootless: run as a normal user with /etc/subuid and /etc/subgid entries;"
        return f"podman does not answer (`podman info`: {why});{hint} check `podman info`, or use `--engine docker`."

    def info(self) -> EngineInfo:
        r = proc.run([*self.command, "info", "--format", "json"], check=False, timeout=60)
        if not r.ok:
            raise EngineError(self._not_answering(r))
        raw = json.loads(r.stdout)
        host, store = raw.get("host") or {}, raw.get("store") or {}
        version = (raw.get("version") or {}).get("Version", "")
        cdi = tuple(d for d in ("/etc/cdi", "/var/run/cdi") if os.path.isdir(d))
        runtime = (host.get("ociRuntime") or {}).get("name")
        return EngineInfo("podman", str(version), str(store.get("graphRoot", "")),
                          bool((host.get("security") or {}).get("rootless")), (runtime,) if runtime else (), cdi)

    def build_argv(self, context: Path, *, iidfile: Path, tags: Sequence[str] = (), network: str = "host",
                   secrets: dict[str, Path] | None = None, build_args: Sequence[str] = (),
                   no_cache: bool = False, target: str | None = None) -> tuple[list[str], dict[str, str]]:
        # --format docker keeps LABELs and the Dockerfile's metadata exactly as Docker would.
        argv = [*self.command, "build", "--format", "docker", "--layers", "--network", network, "--iidfile", str(iidfile)]
        for sid, src in (secrets or {}).items():
            argv += ["--secret", f"id={sid},src={src}"]
        for t in tags:
            argv += ["-t", t]
        argv += [*build_args, *(["--no-cache"] if no_cache else []), *(["--target", target] if target else []),
                 str(context)]
        return argv, {}

    def save_argv(self, refs: Sequence[str]) -> list[str]:
        return [*self.command, "save", "--format", "docker-archive", *(["-m"] if len(refs) > 1 else []), *refs]

    def run_argv(self, image: str, command: Sequence[str] = (), **kw: Any) -> list[str]:
        if kw.get("init", True) and not self.has_init():
            kw["init"] = False
        return super().run_argv(image, command, **kw)

    def has_init(self) -> bool:
        # --init needs Podman's catatonit (a package of its own on Debian); without it, run without.
        return any(os.path.exists(p) for p in CATATONIT)

    def user_args(self, uid: int, gid: int) -> list[str]:
        if os.geteuid() != 0:  # rootless: the caller's UID maps to itself inside, not to root
            return ["--userns=keep-id", "--user", f"{uid}:{gid}"]
        return ["--user", f"{uid}:{gid}"]

    def network_args(self, network: str | None) -> list[str]:
        return ["--network", network or "host"]

    def shares_host_network(self, network: str | None) -> bool:
        return (network or "host") == "host"

    def pull(self, ref: str, out: IO[str]) -> None:
        proc.run([*self.command, "pull", qualified(ref)], stream=True, out=out)

    def untag(self, ref: str) -> None:
        # `podman rmi` refuses an image that has children (the staging image under the final one).
        self._run("untag", ref, ref, check=False)

    def _normalize(self, image: dict[str, Any]) -> dict[str, Any]:
        """Docker's names: `localhost/kernellab:cpu` is `kernellab:cpu`, `docker.io/nvidia/cuda` is `nvidia/cuda`."""
        image = super()._normalize(image)
        return {**image, "RepoTags": [short(t) for t in image.get("RepoTags") or []],
                "RepoDigests": [short(d) for d in image.get("RepoDigests") or []]}


def qualified(ref: str) -> str:
    """A fully qualified name, as Podman needs where no unqualified-search registries are set."""
    first, slash, _ = ref.partition("/")
    if not slash:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def short(name: str) -> str:
    """The name Docker would show for a fully qualified one."""
    for prefix in ("localhost/", "docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name
