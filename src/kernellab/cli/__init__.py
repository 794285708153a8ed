"""The task layer: thin invoke tasks over the library.

Every task is declared with `kernellab.cli.task`, which turns a KernellabError into one clear
line on stderr and a non-zero exit (no traceback for user mistakes). `collection()` assembles
the task modules listed in MODULES into the root namespace that `tasks.py` exposes; a listed
module that fails to import is an error, never a silently missing task.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from typing import Any, Callable, cast

from invoke import Collection, Exit
from invoke import task as invoke_task
from invoke.parser.parser import ParseMachine
from invoke.program import Program
from invoke.tasks import Task

from .. import engine
from ..errors import KernellabError
from ..places import PLACE_HELP, Flags, choose

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


#: Task name -> its verbs, for a task whose first positional argument is a verb (`invoke recipe VERB NAME`): the
#: word `help` in its place asks for the task's help, and the task called without a verb shows that help and exits 2.
_VERBS: dict[str, tuple[str, ...]] = {}
#: The tasks called without their verb in this parse (their help shown, then exit 2).
_BARE: set[str] = set()
_handle = ParseMachine.handle


def _handle_help(self: ParseMachine, token: str) -> Any:
    """`--help`/`-h` (or a verb task's `help`) where invoke would take it as a positional argument's value
    (`invoke recipe --help`, `invoke recipe check --help`) asks for the task's help, as it does after the task's
    positional arguments (`invoke recipe check demo --help`)."""
    ctx = self.context
    if (ctx is not None and self.initial is not None and self.current_state != "unknown" and ctx.missing_positional_args
            and token not in ctx.flags and token not in ctx.inverse_flags and not self.waiting_for_flag_value):
        flag = self.initial.flags[token] if token in self.initial.flags else None  # a Lexicon: .get() misses -h
        verb = ctx.name in _VERBS and ctx.missing_positional_args[0] is ctx.positional_args[0]
        if flag is not None and flag.name == "help" or verb and token == "help" and "--help" in self.initial.flags:
            self.initial.flags["--help"].value = ctx.name
            return None
    return _handle(self, token)


def _complete_with_help(self: ParseMachine) -> Any:
    """A task whose help was asked for needs none of its positional arguments; a verb task called without its verb
    shows its help (and exits 2: `_cleanup_bare`)."""
    ctx = self.context
    asked = self.initial.flags.get("--help") if self.initial is not None else None
    if ctx is not None and asked is not None and ctx.missing_positional_args:
        if asked.value != ctx.name and ctx.name in _VERBS and ctx.missing_positional_args[0] is ctx.positional_args[0]:
            asked.value = ctx.name
            _BARE.add(ctx.name)
        if asked.value == ctx.name:
            for arg in ctx.missing_positional_args:
                arg.value = ""
    return _complete_allowing_optional(self)


ParseMachine.handle = _handle_help  # type: ignore[method-assign]
ParseMachine.complete_context = _complete_with_help  # type: ignore[method-assign]
_parse_tasks, _parse_cleanup = Program.parse_tasks, Program.parse_cleanup


def _parse_tasks_afresh(self: Program) -> None:
    _BARE.clear()
    _parse_tasks(self)


def _cleanup_bare(self: Program) -> None:
    """invoke prints the task's help and exits 0; a verb task called without its verb exits 2, naming its verbs."""
    try:
        _parse_cleanup(self)
    except Exit:
        name = self.args.help.value
        if name in _BARE:
            verbs = _VERBS[name]
            raise Exit(f"kernellab: `invoke {name}` needs a verb: {', '.join(verbs[:-1])} or {verbs[-1]} (each with "
                       f"its flags above).", code=2) from None
        raise


Program.parse_tasks = _parse_tasks_afresh  # type: ignore[method-assign]
Program.parse_cleanup = _cleanup_bare  # type: ignore[method-assign]


def task(*args: Any, **kwargs: Any) -> Any:
    """Like invoke's @task, but KernellabError becomes `Exit(message, code)`.

    The engine is chosen here, once per task: its `--engine` flag if it has one, else invoke config
    `kernellab.engine`, else KERNELLAB_ENGINE (kernellab.engine.current()).

    optional_positional: positional arguments that may be left out at the end (the task sees ""); verbs: the verbs
    of a task whose first positional argument is one (`help` there shows the task's help; none shows it, exit 2).
    place: the task runs work somewhere: it gets every place flag (kernellab.places.Flags, each with its help) and
    receives them as one value, its keyword argument `where` (run_job(c, job, where) runs a job there).
    """

    optional = kwargs.pop("optional_positional", ())
    verbs = kwargs.pop("verbs", ())
    place = kwargs.pop("place", False)
    if place:
        kwargs["help"] = {**PLACE_HELP, **kwargs.get("help", {})}

    def decorate(fn: Callable[..., Any]) -> Task:
        _OPTIONAL_POSITIONAL.update((fn.__name__.replace("_", "-"), name) for name in optional)
        if verbs:
            _VERBS[fn.__name__.replace("_", "-")] = tuple(verbs)
        @functools.wraps(fn)
        def body(c: Any, *a: Any, **kw: Any) -> Any:
            try:
                if place:
                    kw["where"] = Flags(**{f: kw.pop(f) for f in PLACE_HELP if f in kw})
                engine.select((kw["where"].engine if place else kw.get("engine"))
                              or c.config.get("kernellab", {}).get("engine"))
                return fn(c, *a, **kw)
            except KernellabError as e:
                raise Exit(f"kernellab: {e}", code=e.exit_code) from None
            except KeyboardInterrupt:
                raise Exit("kernellab: interrupted; nothing was tagged or left half-written.", code=130) from None

        if place:
            body.__signature__ = _with_place_flags(inspect.signature(fn))  # type: ignore[attr-defined]
        # Long flags only (and -k, a one-letter name): invoke's automatic short flags differ from task to task
        # (-p was --gpu-index in one and --gpu-mode in another) and run out of letters in a task with many flags.
        return cast(Task, invoke_task(body, **{"auto_shortflags": False, **kwargs}))  # invoke's task() is typed as returning a Callable

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return decorate(args[0])
    return decorate


def _with_place_flags(sig: inspect.Signature) -> inspect.Signature:
    """A task's signature as invoke reads it: its own parameters but `where`, then one per place flag."""
    own = [p for name, p in sig.parameters.items() if name != "where"]
    flags = [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default)
             for f in dataclasses.fields(Flags)]
    return sig.replace(parameters=[*own, *flags])


def run_job(c: Any, job: Any, where: Flags, image: Any = None) -> None:
    """Run the job where the task's place flags say (in `image`, a recipe's, instead of a target's); its non-zero
    exit is the task's."""
    code = choose(c, where, image).run(job)
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
