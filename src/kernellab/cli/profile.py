"""`invoke profile` and `invoke sanitize`: Nsight Compute and compute-sanitizer on an op, in the target's
container (the image's tools, else the host's Nsight Compute mounted read-only) or natively."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .. import jobs
from ..errors import UsageError
from ..nsight.calls import choose_dtype, choose_shape
from ..nsight.ncu import CLOCKS_NEED_COUNTERS, SETS
from ..nsight.sanitize import TOOLS
from ..ops.spec import KERNELS, find_op, parse_spec
from ..places import Flags
from . import run_job, task
from .bench import WHEELHOUSE_HELP, refuse_wheelhouse, run_against

_OP = "its name, or an expression matching one op (like pytest -k)"
_KERNELS = "another kernels folder (for a container: one inside the repository)"


def _one_op(k: str | None, kernels: str | None, task_name: str) -> Path:
    """The folder of the op -k selects, answered before a container starts (a typo, or several matches, is one
    sentence)."""
    if not k:
        raise UsageError(f"name the op: `invoke {task_name} -k OP`.")
    return find_op(Path(kernels).resolve() if kernels else KERNELS, k)


def _positive(flag: str, value: Any, kind: Callable[[str], Any]) -> Any:
    """A flag's value as a positive number (invoke hands it over as text)."""
    try:
        number = kind(str(value))
    except ValueError:
        number = None
    if number is None or number <= 0:
        raise UsageError(f"{flag} {value}: give a positive {'whole ' if kind is int else ''}number.")
    return number


@task(place=True, iterable=["impl"], help={
    "k": f"the op to profile: {_OP}", "kernels": _KERNELS,
    "shape": "an index into the op's bench shapes, k=v,k=v, or the sizes as 4096x1024 (default: the first bench shape)",
    "dtype": "the dtype (default: the op's first bench dtype)",
    "impl": "only this candidate or baseline (repeatable; default: all of them)",
    "set": "Nsight Compute's section set: basic (plus warp stalls) or full",
    "kernel": "only kernels whose function name matches this regular expression",
    "clocks": "each implementation again at the GPU's own clocks, not locked to base: how much of the SM clock's "
              "change each kernel's time followed (about 100%: bound on the SM; about 0%: on DRAM)",
    "trace": "a torch.profiler trace (Chrome trace JSON) per implementation instead: needs no counters",
    "timeline": "an Nsight Systems timeline instead: kernels per call, launch gaps, a picture, the .nsys-rep",
    "calls": "--timeline: calls of each implementation captured (default 10)",
    "seconds": "--timeline: stop the capture after this many seconds",
    "against": "a recipe whose published system is profiled beside your kernel, in the recipe's image",
    "wheelhouse": WHEELHOUSE_HELP,
    "out": "the run's folder (default results/<date>-<time>-<gpu>); reports go to its profile/ (or timeline/)",
    "pass_": "this pass of an op with a backward: forward (default), backward or full (Nsight Compute or --timeline)",
})
def profile(c: Any, k: str | None = None, shape: str | None = None, dtype: str | None = None,
            impl: list[str] | None = None, set: str = "basic", kernel: str | None = None, clocks: bool = False,
            trace: bool = False, timeline: bool = False, calls: int | None = None, seconds: float | None = None,
            against: str | None = None, wheelhouse: str | None = None, out: str | None = None,
            kernels: str | None = None, pass_: str = "forward", *, where: Flags) -> None:
    """Nsight Compute (or, --timeline, Nsight Systems) on the calls the benchmark times: candidate and baselines."""
    if set not in SETS:
        raise UsageError(f"unknown --set {set!r}; use one of {', '.join(SETS)}.")
    if timeline and (trace or kernel or clocks):
        flag = "trace" if trace else "kernel" if kernel else "clocks"
        raise UsageError(f"--{flag} is for Nsight Compute's profile; --timeline captures every kernel of each call.")
    if clocks and trace:
        raise UsageError(CLOCKS_NEED_COUNTERS)
    if (calls is not None or seconds is not None) and not timeline:
        raise UsageError("--calls and --seconds are for --timeline.")
    if pass_ not in ("forward", "backward", "full"):
        raise UsageError(f"--pass {pass_}: use forward, backward or full.")
    n_calls = None if calls is None else _positive("--calls", calls, int)
    limit = None if seconds is None else _positive("--seconds", seconds, float)
    folder = _one_op(k, kernels, "profile")
    op, spec = folder.name, parse_spec(folder / "op.toml")
    choose_shape(spec, shape)  # a typo answered before a container starts
    choose_dtype(spec, dtype)

    def make(system: str | None = None) -> jobs.Job:
        return jobs.profile(op, set=set, shape=shape, dtype=dtype, impl=impl, kernel=kernel, clocks=clocks,
                            trace=trace, timeline=timeline, calls=n_calls, seconds=limit, system=system, out=out,
                            kernels=kernels, which=pass_)

    if against:
        run_against(c, against, make, k=op, where=where, verb="profile", wheelhouse=wheelhouse)
        return
    refuse_wheelhouse(wheelhouse, "profile")
    run_job(c, make(), where)


@task(place=True, help={"k": f"the op whose checks run under compute-sanitizer: {_OP}", "kernels": _KERNELS,
                        "tool": "memcheck, racecheck, initcheck, synccheck, or all",
                        "pass_": "the checks run: forward, backward (the gradient checks) or all (default)"})
def sanitize(c: Any, k: str | None = None, tool: str = "memcheck", kernels: str | None = None, pass_: str = "all",
             *, where: Flags) -> None:
    """An op's checks under compute-sanitizer: each error with kernel, file:line and test case."""
    if tool not in (*TOOLS, "all"):
        raise UsageError(f"unknown --tool {tool!r}; use one of {', '.join(TOOLS)} or all.")
    if pass_ not in ("forward", "backward", "all"):
        raise UsageError(f"--pass {pass_}: use forward, backward or all.")
    run_job(c, jobs.sanitize(_one_op(k, kernels, "sanitize").name, tool=tool, kernels=kernels, which=pass_), where)
