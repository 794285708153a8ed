"""The task layer: thin invoke tasks over the library.

Every task is declared with `kernellab.cli.task`, which turns a KernellabError into one clear
line on stderr and a non-zero exit (no traceback for user mistakes). `collection()` assembles
all task modules into the root namespace that `tasks.py` exposes.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

from invoke import Collection, Exit
from invoke import task as invoke_task
from invoke.tasks import Task

from ..errors import KernellabError

#: Task modules, in the order `invoke --list` shows them.
MODULES = ("images", "containers", "doctor", "kernels", "bench", "transfer")


def task(*args: Any, **kwargs: Any) -> Any:
    """Like invoke's @task, but KernellabError becomes `Exit(message, code)`."""

    def decorate(fn: Callable[..., Any]) -> Task:
        @functools.wraps(fn)
        def body(*a: Any, **kw: Any) -> Any:
            try:
                return fn(*a, **kw)
            except KernellabError as e:
                raise Exit(f"kernellab: {e}", code=e.exit_code) from None
            except KeyboardInterrupt:
                raise Exit("kernellab: interrupted; nothing was tagged or left half-written.", code=130) from None

        return invoke_task(body, **kwargs)

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return decorate(args[0])
    return decorate


def configured_target(c: Any, target: str | None = None) -> str | None:
    """--target if given, else kernellab.target from invoke's configuration (invoke.yaml), else None."""
    return target or c.config.get("kernellab", {}).get("target")


def collection() -> Collection:
    ns = Collection()
    for name in MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}":
                continue  # a task module not written yet
            raise
        for obj in vars(module).values():
            if isinstance(obj, Task) and obj.__module__ == module.__name__:
                ns.add_task(obj)
    return ns
