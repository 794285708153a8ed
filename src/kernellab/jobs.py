"""What runs: a Job is a command line as data, built by one small function per run task.

A job says what to run (argv, run from the repository root), which of its argv items are paths in the
repository (a container sees the repository at /workspace, so a place maps them), whether it needs a GPU
and a terminal, and how it fans out on a cluster: its parts (one per op, one per experiment, N copies; a job
without parts is one task per GPU type) and the merger that writes the run's own table from what the parts
wrote. Where it runs is kernellab.places' job; the task layer is flags -> job -> place. The parts are built
from these same functions, so the kernel tests' pytest command line and the modules' flags are written once.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import ROOT
from .errors import UsageError

#: The kernel tests, as `invoke test` runs them everywhere (here, in a container, on a cluster node).
KERNEL_TESTS = ("tests/test_kernels.py",)


#: In a part's argv: the folder its task writes, results/<run>/<GPU type>/<part> (the cluster fills it in).
RESULTS = "{results}"


@dataclass(frozen=True)
class Part:
    """One task of a job on a cluster, run once per GPU type: its name (the op, the experiment, task-<i>) and
    its command line from the repository's root (RESULTS in it: the folder it writes) with its own variables."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    name: str                                # test, bench, build-kernels, watch, profile, sanitize, shell, ...
    argv: tuple[str, ...]                    # run from the repository root; "python" is the place's Python
    paths: frozenset[int] = frozenset()      # indices of argv items that are repository paths
    gpu: bool = True                         # needs a GPU where there is one
    interactive: bool = False                # needs this terminal (stdin, a tty)
    select: str | None = None                # -k, as the run's record names it
    #: How it fans out on a cluster (made when it is submitted: finding the ops may fail); None: one task per
    #: GPU type running argv. merger: "module:function" writing the run's own table from the parts' folders.
    parts: Callable[[], Sequence[Part]] | None = field(default=None, compare=False)
    merger: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = ()              # host tools a container may borrow when its image lacks them (ncu)
    results: str | None = None               # the flag naming the folder it writes (a cluster task sets it)
    scratch: Path | None = None              # a folder for the files it writes, $KERNELLAB_OUT where it runs
    output: Path | None = None               # a file its output goes to (stdout and stderr), not this terminal
    timeout: float | None = None             # stopped after this many seconds (exit code proc.TIMED_OUT)
    mounts: tuple[str, ...] = ()             # host:container[:ro] a container adds (a native place refuses them)

    def with_paths(self, mapper: Callable[[Path], str]) -> tuple[str, ...]:
        """argv with each repository path passed through mapper."""
        return tuple(mapper(Path(a)) if i in self.paths else a for i, a in enumerate(self.argv))


def _build(name: str, head: list[str], *flags: tuple[str, str | Path | bool | None], **job: object) -> Job:
    """A job from a command head and (flag, value) pairs: None/False left out, True a bare flag, a Path
    a repository path the place maps."""
    argv, paths = list(head), set()
    for flag, value in flags:
        if value is None or value is False:
            continue
        argv.append(flag)
        if isinstance(value, Path):
            paths.add(len(argv))
            argv.append(str(value))
        elif value is not True:
            argv.append(str(value))
    return Job(name, tuple(argv), frozenset(paths), **job)  # type: ignore[arg-type]


def _path(value: str | None) -> Path | None:
    return Path(value).resolve() if value else None


def test(k: str | None = None, *, suite: str = "kernels", junit: str | None = None) -> Job:
    """The kernel tests (suite "all": the whole tests/), checked against PyTorch; on a cluster one part per op
    (its JUnit file in its folder) and a table of counts per op and GPU type."""
    paths = list(KERNEL_TESTS) if suite == "kernels" else ["tests"]
    return _build("test", ["python", "-m", "pytest", *paths, "-q", "-rs", "-p", "no:cacheprovider"], ("-k", k),
                  ("--junitxml", junit), select=k, parts=partial(per_op, k, _test_part),
                  merger="kernellab.cluster.report:test_table")


def _test_part(op: str, select: str) -> Part:
    return Part(op, test(junit=f"{RESULTS}/junit.xml").argv, {"KERNELLAB_OPS": select})


def bench(k: str | None = None, *, quick: bool = False, compare: str | None = None, out: str | None = None,
          system: str | None = None, min_time: float | None = None) -> Job:
    """The bench; system: a recipe's offer of baselines (kernellab.bench.systems.Offer as JSON, --against); on a
    cluster one part per op, merged per GPU type and across them."""
    return _build("bench", ["python", "-m", "kernellab.bench"], ("-k", k), ("--quick", quick),
                  ("--min-time", None if min_time is None else repr(min_time)),
                  ("--compare", _run_folder(compare)), ("--out", _path(out)), ("--system", system), select=k,
                  results="--out", parts=partial(per_op, k, partial(_bench_part, quick=quick, min_time=min_time)),
                  merger="kernellab.cluster.report:bench_tables")


def _bench_part(op: str, select: str, *, quick: bool, min_time: float | None) -> Part:
    return Part(op, (*bench(select, quick=quick, min_time=min_time).argv, "--out", RESULTS))


def per_op(k: str | None, part: Callable[[str, str], Part]) -> list[Part]:
    """One part per op -k selects, each selecting exactly its op; UsageError when none matches."""
    from .ops import spec

    chosen = spec.discover(select=k)
    if not chosen:
        raise UsageError(f"no op matches -k {k!r}; the ops are the folders under kernels/.")
    names = [s.name for s in spec.discover()]
    return [part(s.name, exact_select(s.name, names)) for s in chosen]


def exact_select(name: str, names: Sequence[str]) -> str:
    """A -k expression (substring semantics) that selects op `name` and no op whose name contains it."""
    others = [n for n in names if n != name and name in n]
    return " and ".join([name, *(f"not {n}" for n in others)])


def build_kernels(k: str | None = None, *, verbose: bool = False) -> Job:
    return _build("build-kernels", ["python", "-m", "kernellab.ops", "build"], ("-k", k), ("--verbose", verbose),
                  select=k)


def watch(op: str, *, bench: bool = False, kernels: str | None = None) -> Job:
    tty = sys.stdin.isatty() and sys.stdout.isatty()  # a cleared screen per round, Ctrl-C through it
    return _build("watch", ["python", "-m", "kernellab.watch", "-k", op], ("--bench", bench),
                  ("--kernels", _path(kernels)), interactive=tty, select=op)


def profile(op: str, *, set: str = "basic", shape: str | None = None, dtype: str | None = None,
            impl: list[str] | None = None, kernel: str | None = None, trace: bool = False, timeline: bool = False,
            calls: int | None = None, seconds: float | None = None, system: str | None = None,
            out: str | None = None, kernels: str | None = None, which: str = "forward", clocks: bool = False) -> Job:
    """Nsight Compute on the launches the bench times (--clocks: again at the GPU's own clocks); --timeline: one
    Nsight Systems capture of them instead."""
    common = (("--shape", shape), ("--dtype", dtype), *[("--impl", i) for i in impl or []], ("--system", system),
              ("--out", _path(out)), ("--kernels", _path(kernels)), ("--pass", None if which == "forward" else which))
    if timeline:
        return _build("profile", ["python", "-m", "kernellab.nsight.op_timeline", "-k", op], *common,
                      ("--calls", None if calls is None else str(calls)),
                      ("--seconds", None if seconds is None else f"{seconds:g}"), select=op, tools=("nsys",),
                      results="--out")
    return _build("profile", ["python", "-m", "kernellab.nsight.profile", "-k", op, "--set", set], *common,
                  ("--kernel", kernel), ("--clocks", clocks), ("--trace", trace), select=op,
                  tools=() if trace else ("ncu",), results="--out")


def sanitize(op: str, *, tool: str = "memcheck", kernels: str | None = None, which: str = "all") -> Job:
    return _build("sanitize", ["python", "-m", "kernellab.nsight.sanitize", "-k", op, "--tool", tool],
                  ("--kernels", _path(kernels)), ("--pass", None if which == "all" else which), select=op)


def shell(cmd: str | None = None) -> Job:
    """bash, or --cmd as one bash command line (`cd build && make` works).

    --cmd goes to bash whole, as with `docker run IMAGE sh -c CMD`, so operators, pipes, quotes and
    variables mean what they mean in a shell. Not a login shell (-l): Debian's /etc/profile resets PATH
    and would hide the image's /opt/venv/bin and CUDA bin, which the image puts on PATH through ENV.
    """
    return Job("shell", ("bash", "-c", cmd) if cmd else ("bash",), interactive=cmd is None)


def submit(command: str, copies: int = 1) -> Job:
    """Any command line, run with bash -c from the repository (`invoke submit -- CMD`), copies times per GPU type
    on a cluster (KERNELLAB_TASK numbers them)."""
    if copies < 1:
        raise UsageError(f"--tasks {copies}: give 1 or more tasks per GPU type.")
    argv = ("bash", "-c", command)
    return Job("submit", argv, parts=lambda: [Part(f"task-{i}", argv) for i in range(copies)])


def _run_folder(name: str | None) -> Path | None:
    """--compare's run: a path, or a bare run name under results/."""
    if not name:
        return None
    path = Path(name).resolve()
    if not path.exists() and (ROOT / "results" / name).exists():
        path = (ROOT / "results" / name).resolve()
    return path


def recipe_case(command: str, cwd: str, *, output: Path, scratch: Path, timeout: float, gpu: bool = True,
                mounts: tuple[str, ...] = ()) -> Job:
    """One repeat of a recipe's experiment case: its command through bash (-e, pipefail) in /src/<cwd> of the
    recipe's image (a container of it, or the cluster task that already is one), its output to a file."""
    return Job("recipe-case", ("bash", "-eo", "pipefail", "-c", f"cd /src/{cwd}\n{command}"), gpu=gpu,
               output=output, scratch=scratch, timeout=timeout, mounts=mounts)


def recipe_input(command: str, *, output: Path, mounts: tuple[str, ...]) -> Job:
    """The command that makes (or prepares) a recipe's input in its image, into a mounted folder; no GPU."""
    return Job("recipe-input", ("bash", "-eo", "pipefail", "-c", command), gpu=False, output=output, mounts=mounts)


def recipe_run(recipe: str, experiments: Sequence[str], *, quick: bool = False) -> Job:
    """`invoke recipe run --on slurm`: one part per experiment of the recipe, run where its task is (the recipe's
    image), its cases and raw output written in its folder (kernellab.recipes.on_node); merged into one record per GPU
    type (kernellab.recipes.on_cluster.merge)."""
    def part(experiment: str) -> Part:
        return Part(experiment, ("python", "-m", "kernellab.recipes.on_node", recipe, experiment,
                                 *(["--quick"] if quick else []), "--out", RESULTS))

    return Job("recipe", ("python", "-m", "kernellab.recipes.on_node", recipe), select=",".join(experiments),
               parts=lambda: [part(e) for e in experiments], merger="kernellab.recipes.on_cluster:merge")


def in_repository(path: Path) -> str:
    """A repository path relative to the repository's root (a container's /workspace, a cluster task's working
    folder); UsageError for one outside the repository."""
    if not path.is_relative_to(ROOT):
        raise UsageError(f"{path} is outside the repository, which is all the container sees; "
                         "move it under the repository or use --native.")
    return path.relative_to(ROOT).as_posix()
