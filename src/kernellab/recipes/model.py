"""A recipe as typed records (kernellab.recipes.read makes them from recipe.toml), with the arithmetic of derived
grid values and the filling of {name} placeholders. Nothing here touches files, git, Docker or the network."""
from __future__ import annotations

import ast
import difflib
import hashlib
import itertools
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import RecipeError

FILE = "recipe.toml"
#: A placeholder in a command: {name}. `${NAME}` is the shell's and is left alone.
PLACEHOLDER = re.compile(r"(?<!\$)\{([a-z_][a-z0-9_]*)\}")
JUDGES = ("ratio", "absolute")
#: Which of a metric's matches in a command's output is its value: the last (a final line), or the best of a sweep.
REDUCE = ("last", "min", "max")
BETTER = ("lower", "higher")


#: One case of an experiment: its grid's values and the derived ones, by name (TOML's scalars).
Params = dict[str, "str | int | float | bool"]


@dataclass(frozen=True)
class Paper:
    title: str
    venue: str
    year: int
    link: str
    no_claims: str = ""                  # why the recipe encodes no claims yet (shown wherever claims would be)


@dataclass(frozen=True)
class Requirements:
    archs: tuple[str, ...] = ()          # compute capabilities the code supports ("8.0"); () = any
    gpu_memory_gb: float | None = None
    ram_gb: float | None = None
    disk_gb: float | None = None
    note: str = ""                       # which GPUs it runs on, and why (shown by `recipe check`)
    cpu: bool = False                    # it also runs on CPU: a target without CUDA runs its CPU experiments
    min_cuda: str | None = None          # the oldest CUDA its code builds with ("12.0"); None = any


@dataclass(frozen=True)
class Source:
    """A repository at a full commit: fetched from `url`, or made from `folder` (a folder of the recipe's own,
    committed the same way everywhere, so that its commit names its contents)."""

    name: str
    url: str                             # "" for a folder source
    commit: str
    dest: str = "."                      # where under /src
    submodules: Mapping[str, str] = field(default_factory=dict)  # path -> the commit it must be at
    folder: Path | None = None           # a folder source: the recipe's own folder it is made from

    @property
    def origin(self) -> str:
        """Where it comes from, as a record shows it: the URL, or the folder (relative to the checkout)."""
        if self.folder is None:
            return self.url
        from .. import shown
        return shown(self.folder)


@dataclass(frozen=True)
class Patch:
    file: Path
    source: str
    reason: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.file.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Variant:
    """Data made by a command in the recipe's image (writing into /out): a stand-in for an input, or a small one."""

    run: str
    description: str


@dataclass(frozen=True)
class Input:
    """A dataset experiments read at /inputs/NAME (read-only): fetched (url, its sha256 and size; `prepare` turns
    the download at /download into the files) or made by `run`; cached, shared by runs and machines.
    `stand_in` makes data of the same shape where the real data cannot be had, `quick` a small one for --quick;
    a case on either judges no claim."""

    name: str
    description: str
    url: str | None = None
    sha256: str = ""                      # "" = recorded at the first download (locks/inputs.json), checked after
    size_gb: float | None = None
    prepare: str | None = None
    run: str | None = None
    stand_in: Variant | None = None
    quick: Variant | None = None


@dataclass(frozen=True)
class Step:
    name: str
    run: str
    cwd: str = "."


@dataclass(frozen=True)
class Metric:
    name: str
    regex: str
    unit: str
    better: str  # "lower" or "higher"
    reduce: str = "last"  # REDUCE: a script that prints one number per configuration of a sweep wants "min"


@dataclass(frozen=True)
class Sanity:
    name: str
    regex: str
    max: float | None = None
    min: float | None = None

    def bound(self) -> str:
        return " and ".join(s for s in (f">= {self.min:g}" if self.min is not None else "",
                                        f"<= {self.max:g}" if self.max is not None else "") if s)


@dataclass(frozen=True)
class Experiment:
    name: str
    run: str
    cwd: str = "."
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    derive: Mapping[str, str] = field(default_factory=dict)   # name -> arithmetic over the grid's names
    quick: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    repeats: int = 1
    timeout_s: float = 600.0
    metrics: tuple[Metric, ...] = ()
    sanity: tuple[Sanity, ...] = ()
    description: str = ""
    inputs: tuple[str, ...] = ()          # the inputs it reads, at /inputs/NAME
    needs_cuda: bool = False              # runs only in a target with CUDA (a CPU target leaves it out, said so)

    def cases(self, quick: bool = False) -> list[Params]:
        """Every point of the grid (with derived values), in the grid's order; --quick: the quick grid."""
        grid = dict(self.grid)
        if quick:
            grid.update(self.quick or {k: v[:1] for k, v in self.grid.items()})
        points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]
        return [{**p, **{k: evaluate(expr, p) for k, expr in self.derive.items()}} for p in points]

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)


@dataclass(frozen=True)
class Claim:
    name: str
    experiment: str
    metric: str
    case: Mapping[str, Any]
    value: float
    unit: str
    gpu: str                              # the paper's GPU ("A100")
    where: str                            # where the paper prints it ("README, table 2")
    judge: str = "ratio"                  # "ratio" against a baseline from this run, or "absolute"
    baseline: str | None = None           # the baseline experiment (ratio)
    baseline_value: float | None = None   # the paper's number for that baseline
    tolerance: float = 0.1                # how far short of the claim still counts (fraction)
    setting: str = ""


@dataclass(frozen=True)
class Package:
    """The published system as a package from the index (PyPI) at one exact version: installed in the recipe's pip
    layer, its wheel's sha256 locked beside the pins and named in every record, as a source's commit is."""

    name: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Recipe:
    name: str
    folder: Path
    paper: Paper
    target: str | None                    # a named target, or None with `target_table`
    target_table: Mapping[str, Any] | None
    pip: tuple[str, ...]
    requirements: Requirements
    sources: tuple[Source, ...]
    patches: tuple[Patch, ...]
    steps: tuple[Step, ...]
    experiments: tuple[Experiment, ...]
    claims: tuple[Claim, ...]
    inputs: tuple[Input, ...] = ()
    as_of: str | None = None              # the recipe's pip layer resolves as of this day (default: the target's)
    packages: tuple[Package, ...] = ()    # the system as packages at exact versions (besides, or instead of, sources)
    baselines: Mapping[str, Path] = field(default_factory=dict)   # op in kernels/ -> adapter file (invoke bench)

    @property
    def pip_all(self) -> tuple[str, ...]:
        """Everything the recipe's pip layer installs: its packages at their versions, then its pip list."""
        return (*(p.requirement for p in self.packages), *self.pip)

    @property
    def file(self) -> Path:
        return self.folder / FILE

    def experiment(self, name: str) -> Experiment:
        for e in self.experiments:
            if e.name == name:
                return e
        raise RecipeError(f"recipe {self.name} has no experiment `{name}`{did_you_mean(name, self.experiment_names)}.")

    def input(self, name: str) -> Input:
        for i in self.inputs:
            if i.name == name:
                return i
        raise RecipeError(f"recipe {self.name} has no input `{name}`{did_you_mean(name, [i.name for i in self.inputs])}.")

    @property
    def experiment_names(self) -> list[str]:
        return [e.name for e in self.experiments]

    def digest(self) -> str:
        """sha256 of recipe.toml and every file beside it (patches, scripts): what the recipe is."""
        h = hashlib.sha256()
        # Not its locks/: what a build resolved is not what the recipe is (a written lock rebuilds nothing).
        skip = {"__pycache__", "locks"}
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file() and not skip & set(p.relative_to(self.folder).parts)):
            h.update(path.relative_to(self.folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()


# --------------------------------------------------------------------------- derived values

_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}


def evaluate(expr: str, names: Mapping[str, Any]) -> Any:
    """Arithmetic over grid values (+ - * / // %, numbers, names, int(), round()); nothing else runs."""
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise RecipeError(f"uses `{node.id}`, which is not in the grid ({', '.join(names) or 'empty'})")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "round")
                and len(node.args) == 1 and not node.keywords):
            value = ev(node.args[0])
            return int(value) if node.func.id == "int" else round(value)
        raise RecipeError(f"`{expr}` may use only numbers, the grid's names, + - * / // %, int() and round()")

    try:
        return ev(ast.parse(expr, mode="eval"))
    except SyntaxError:
        raise RecipeError(f"`{expr}` is not an arithmetic expression") from None




def substitute(text: str, values: Mapping[str, Any]) -> str:
    """Fill {name} placeholders (not the shell's ${NAME}) from values."""
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), text)


def did_you_mean(name: str, known: list[str]) -> str:
    """"; did you mean `x`?" for the closest known name, or ""."""
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean `{close[0]}`?" if close else ""
