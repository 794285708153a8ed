"""The task layer: thin invoke tasks over the library.

Every task is declared with `kernellab.cli.task`, which turns a KernellabError into one clear
line on stderr and a non-zero exit (no traceback for user mistakes). `collection()` assembles
the task modules listed in MODULES into the root namespace that `tasks.py` exposes; a listed
module that fails to import is an error, never a silently missing task.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, cast

from invoke import Collection, Exit
from invoke import task as invoke_task
from invoke.parser.parser import ParseMachine
from invoke.tasks import Task

from .. import engine
from ..errors import KernellabError
from ..places import PLACE_HELP, choose

#: Every task module (kernellab.cli.<name>), in the order `invoke --list` shows them. A new module is added here.
MODULES = ("images", "containers", "devenv", "doctor", "kernels", "watch", "bench", "profile", "transfer", "cluster",
           "recipes")


#: Help for --engine and --gpu-mode where a task takes them without the other place flags (one text each).
ENGINE_HELP = PLACE_HELP["engine"]
GPU_MODE_HELP = PLACE_HELP["gpu_mode"]


#: (task name, argument) pairs of positional arguments that may be left out at the end (`invoke recipe list`).
#: invoke has no such thing: every positional argument is required when the task's context closes. A task
#: declares one with `@task(positional=[..., "name"], optional_positional=["name"])` and a default of None.
_OPTIONAL_POSITIONAL: set[tuple[str, str]] = set()
_complete_context = ParseMachine.complete_context


def _complete_allowing_optional(self: ParseMachine) -> Any:
    context = self.context
    if context is not None:
        for arg in context.positional_args:
            if arg.value is None and (context.name, arg.name) in _OPTIONAL_POSITIONAL:
                arg.value = ""   # left out: the task sees "" and says what it needs, in one sentence
    return _complete_context(self)


ParseMachine.complete_context = _complete_allowing_optional  # type: ignore[method-assign]


def task(*args: Any, **kwargs: Any) -> Any:
    """Like invoke's @task, but KernellabError becomes `Exit(message, code)`.

    The engine is chosen here, once per task: its `--engine` flag if it has one, else invoke config
    `kernellab.engine`, else KERNELLAB_ENGINE (kernellab.engine.current()).
    """

    optional = kwargs.pop("optional_positional", ())

    def decorate(fn: Callable[..., Any]) -> Task:
        _OPTIONAL_POSITIONAL.update((fn.__name__.replace("_", "-"), name) for name in optional)
        @functools.wraps(fn)
        def body(c: Any, *a: Any, **kw: Any) -> Any:
            try:
                engine.select(kw.get("engine") or c.config.get("kernellab", {}).get("engine"))
                return fn(c, *a, **kw)
            except KernellabError as e:
                raise Exit(f"kernellab: {e}", code=e.exit_code) from None
            except KeyboardInterrupt:
                raise Exit("kernellab: interrupted; nothing was tagged or left half-written.", code=130) from None

        # Long flags only (and -k, a one-letter name): invoke's automatic short flags differ from task to task
        # (-p was --gpu-index in one and --gpu-mode in another) and run out of letters in a task with many flags.
        return cast(Task, invoke_task(body, **{"auto_shortflags": False, **kwargs}))  # invoke's task() is typed as returning a Callable

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return decorate(args[0])
    return decorate


def run_job(c: Any, job: Any, flags: dict[str, Any]) -> None:
    """The task's place flags (its locals) -> a place; run the job there; its non-zero exit is the task's."""
    code = choose(c, **{k: flags[k] for k in PLACE_HELP if k in flags}).run(job)
    if code:
        raise Exit(code=code)


def configured_target(c: Any, target: str | None = None) -> str | None:
    """--target if given, else kernellab.target from invoke's configuration (invoke.yaml), else None."""
    return target or c.config.get("kernellab", {}).get("target")


def collection() -> Collection:
    """The root namespace: every task of every module in MODULES."""
    ns = Collection()
    for name in MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ImportError as e:
            raise ImportError(f"kernellab: the task module {__name__}.{name} (listed in {__name__}.MODULES) "
                              f"failed to import: {type(e).__name__}: {e}", name=e.name, path=e.path) from e
        for obj in vars(module).values():
            if isinstance(obj, Task) and obj.__module__ == module.__name__:
                ns.add_task(obj)
    return ns
