"""Container engines behind one interface: Docker and (rootless) Podman.

Every engine call kernellab makes (inspect, save/load, import, tag, build and run command lines,
GPU flags) goes through an `Engine`. Which one: `--engine`, invoke config `kernellab.engine`,
or KERNELLAB_ENGINE; else the first of docker, podman that answers. Library functions take an
`engine=` argument, so tests can pass a fake object instead of patching private functions.

Builds and runs are command lines for the engine's CLI (the Docker SDK has no BuildKit, and
Podman has no daemon to talk to); Docker's liveness probe and `info` use the Docker SDK.
"""
from __future__ import annotations

import os

from ..errors import EngineError
from .base import Engine, EngineInfo, Image
from .docker import Docker
from .podman import Podman

ENGINES = ("docker", "podman")
#: Adding an engine: a module with an Engine subclass, and one line here.
_REGISTRY: dict[str, type[Engine]] = {"docker": Docker, "podman": Podman}
_chosen: str | None = None
_found: str | None = None
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
    global _found
    if _found is None:
        # Probed once per process: a Docker ping and `podman info` cost time on every call otherwise.
        _found = next((n for n in ENGINES if by_name(n).answers()), None)
    return by_name(_found or "docker")  # nothing answers: docker's problem() names the remedy


def answering() -> list[Engine]:
    """Every engine that answers here (doctor lists them)."""
    return [by_name(n) for n in ENGINES if by_name(n).answers()]


def resolve_engine(engine: Engine | None) -> Engine:
    return engine if engine is not None else current()


__all__ = ["ENGINES", "Docker", "Engine", "EngineInfo", "Image", "Podman", "answering", "by_name", "current",
           "resolve_engine", "select"]
