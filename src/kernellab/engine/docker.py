"""Docker: BuildKit builds through the CLI (buildx, or a 20.10 client with it built in); the SDK for ping and info."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

from .. import proc
from ..errors import DockerError, EngineError, KernellabError
from .base import Engine, EngineInfo


class Docker(Engine):
    name = "docker"
    gpu_modes = ("nvidia", "cdi", "devices")

    def _client(self, timeout: int = 20) -> Any:
        try:
            import docker
        except ImportError:
            raise DockerError("the docker Python package is missing; run `make setup` (or `pip install docker`).") \
                from None
        if self.host:  # ssh://: through the system's ssh client, as the CLI goes (keys, config, agent)
            return docker.DockerClient(base_url=self.host, use_ssh_client=True, timeout=timeout)  # type: ignore[attr-defined]
        return docker.from_env(timeout=timeout)  # type: ignore[attr-defined]

    def answers(self) -> bool:
        try:
            self._client().ping()
            return True
        except Exception:  # no SDK (a cluster node's bare Python), or it cannot talk: the CLI decides
            pass
        if shutil.which(self.cli) is None:
            return False
        try:
            return proc.run([*self.command, "version", "--format", "{{.Server.Version}}"], check=False, timeout=60).ok
        except KernellabError:
            return False

    def problem(self) -> str:
        where = self.host or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if shutil.which(self.cli) is None:
            return "the docker CLI is not installed; run `make engine` (installs docker.io) or use `--engine podman`."
        if self.host:
            return (f"cannot reach the Docker engine at {where}: `ssh` to it must log in without a password "
                    f"(a key) and find `docker` there; try `{' '.join(self.command)} version`.")
        return (f"cannot reach a Docker engine at {where}; start one (`make engine`, or `sudo systemctl start "
                f"docker`), or use `--engine podman`, and check with `invoke doctor`.")

    def info(self) -> EngineInfo:
        try:
            client = self._client()
            raw, version = client.info(), client.version()
        except KernellabError:
            raise
        except Exception as e:
            # The SDK's own ssh transport is pickier than the CLI's (its environment, its ssh options): ask the CLI.
            raw = self._cli_info()
            if raw is None:
                raise EngineError(f"{self.problem()[:-1]} ({type(e).__name__}).") from None
            version = {"Version": raw.get("ServerVersion", "")}
        return EngineInfo("docker", str(version.get("Version", "")), str(raw.get("DockerRootDir", "/var/lib/docker")),
                          "rootless" in " ".join(raw.get("SecurityOptions") or []),
                          tuple(sorted((raw.get("Runtimes") or {}).keys())), tuple(raw.get("CDISpecDirs") or ()))

    def _cli_info(self) -> dict[str, Any] | None:
        """`docker info` as JSON through the CLI, or None when it does not answer."""
        try:
            r = proc.run([*self.command, "info", "--format", "{{json .}}"], check=False, timeout=120)
            return dict(json.loads(r.stdout)) if r.ok and r.stdout.strip() else None
        except (KernellabError, ValueError):
            return None

    def builder(self) -> list[str]:
        """A docker CLI that builds with BuildKit: buildx if present, else a client with it built in."""
        candidates = list(dict.fromkeys(p for p in (shutil.which(self.cli), "/usr/bin/docker") if p and os.path.exists(p)))
        if not candidates:
            raise EngineError("the docker CLI is not installed; run `make engine` or install docker.io.")
        for cli in candidates:
            if proc.run([cli, "buildx", "version"], check=False).ok:
                return [cli, *self.command[1:], "buildx", "build", "--load"]
        for cli in candidates:
            version = proc.run([cli, "version", "--format", "{{.Client.Version}}"], check=False).stdout.strip()
            major = re.match(r"(\d+)", version)
            if major and int(major.group(1)) < 23:  # before 23, `docker build` had BuildKit built in
                return [cli, *self.command[1:], "build"]
        raise EngineError("no docker CLI here can build with BuildKit: install the buildx plugin "
                          "(docker-buildx) or Debian's docker.io client.")

    def build_argv(self, context: Path, *, iidfile: Path, tags: Sequence[str] = (), network: str = "host",
                   secrets: dict[str, Path] | None = None, build_args: Sequence[str] = (),
                   no_cache: bool = False, target: str | None = None) -> tuple[list[str], dict[str, str]]:
        argv = [*self.builder(), "--network", network, "--progress", "plain", "--iidfile", str(iidfile)]
        for sid, src in (secrets or {}).items():
            argv += ["--secret", f"id={sid},src={src}"]
        for t in tags:
            argv += ["-t", t]
        argv += [*build_args, *(["--no-cache"] if no_cache else []), *(["--target", target] if target else []),
                 str(context)]
        return argv, {"DOCKER_BUILDKIT": "1"}

    def untag(self, ref: str) -> None:
        # -f: a container still using the image (a probe that Ctrl-C stopped, removed a moment later) makes Docker
        # refuse to drop the image's last name; forced, it drops the name and leaves the image while it is used.
        self._run("rmi", "--no-prune", "-f", ref, check=False)
