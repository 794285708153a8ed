"""Op specs: each folder under kernels/ with an op.toml is one op; this module reads and checks them.

Adding an op is adding a folder (kernels/README.md says what goes in it); nothing lists the ops.
Only TOML is read here, so listing and selecting ops never imports torch. Building and loading
an op is kernellab.ops.
"""
from __future__ import annotations

import difflib
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any, Callable

from .. import ROOT, shown
from ..errors import ConfigError
from . import backward as backward_spec
from . import tolerances

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

KINDS = ("cuda", "cpu", "triton")
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
DEFAULT_SEEDS = [0, 1, 2]
KERNELS = ROOT / "kernels"
_KEYS = {
    "description", "kind", "sources", "candidates", "dtypes", "bench_dtypes", "seeds", "tolerances",
    "bytes", "flops", "baselines", "test_shapes", "bench_shapes", "min_cuda", "requires", "backward",
}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_EXPR_FUNCS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor}


@dataclass(frozen=True)
class OpSpec:
    """One op as its op.toml describes it."""

    name: str
    path: Path
    kind: str  # "cuda" | "cpu" | "triton"
    description: str
    test_shapes: list[dict[str, int]]
    bench_shapes: list[dict[str, int]]
    dtypes: list[str]
    bench_dtypes: list[str]
    seeds: list[int]
    tolerances: dict[str, tuple[float, float]]  # dtype name -> (atol, rtol)
    bytes_expr: str  # python expressions over the shape's dims and `itemsize`
    flops_expr: str
    baselines: list[str]
    #: candidate name -> op registered by the binding (torch.ops.<namespace>.<op>), or a function of a Triton module
    candidates: dict[str, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)  # file names inside `path`
    #: The oldest CUDA toolkit the sources compile with, and why: `min_cuda = ["12.8", "uses X"]` in op.toml.
    min_cuda: tuple[str, str] | None = None
    #: candidate -> the arch-specific code it needs ("9.0a"): `requires = { wgmma = "sm_90a" }` in op.toml.
    requires: dict[str, str] = field(default_factory=dict)
    #: op.toml's [backward] (kernellab.ops.backward), None for a forward-only op.
    backward: backward_spec.BackwardSpec | None = None

    def __hash__(self) -> int:
        return hash((self.name, str(self.path)))

    def bytes_moved(self, shape: dict, dtype: str, which: str = "forward") -> int:
        """Fewest bytes the op must move through device memory at this shape and dtype, in pass `which`
        (forward, backward, or full: the two added)."""
        return int(sum(_evaluate(e, shape, dtype) for e in self._exprs(which, "bytes")))

    def flops(self, shape: dict, dtype: str, which: str = "forward") -> int:
        """Floating-point operations the op does at this shape and dtype, in pass `which`."""
        return int(sum(_evaluate(e, shape, dtype) for e in self._exprs(which, "flops")))

    @property
    def passes(self) -> tuple[str, ...]:
        """The passes the op is timed in: forward, and backward and full where it declares a backward."""
        return backward_spec.PASSES if self.backward else ("forward",)

    def _exprs(self, which: str, key: str) -> list[str]:
        forward = self.bytes_expr if key == "bytes" else self.flops_expr
        if which == "forward":
            return [forward]
        if which not in backward_spec.PASSES or self.backward is None:
            raise ConfigError(f"{self.name} has no {which} pass (its passes: {', '.join(self.passes)}).")
        back = self.backward.bytes_expr if key == "bytes" else self.backward.flops_expr
        return [back] if which == "backward" else [forward, back]

    @property
    def needs_gpu(self) -> bool:
        return self.kind in ("cuda", "triton")


def discover(root: Path | None = None, select: str | None = None) -> list[OpSpec]:
    """The ops under `root` (default kernels/), each folder with an op.toml, optionally filtered.

    `select` works like pytest -k on op names: substrings joined with and/or/not and parentheses.
    """
    root = Path(root) if root is not None else KERNELS
    if not root.is_dir():
        raise ConfigError(f"no kernels folder at {root}; run from a kernellab checkout.")
    specs = [
        parse_spec(folder / "op.toml")
        for folder in sorted(root.iterdir())
        if (folder / "op.toml").is_file() and not folder.name.startswith(("_", "."))
    ]
    if select:
        matcher = compile_select(select)
        specs = [s for s in specs if matcher(s.name)]
    return specs


def parse_spec(path: Path) -> OpSpec:
    """Read and check one op.toml; a mistake raises ConfigError naming the file and the key."""
    folder = path.parent
    name = folder.name
    where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{where}: {e}") from None
    if not _NAME.match(name):
        raise ConfigError(f"{where}: the folder name {name!r} must be a lowercase identifier (it names the extension).")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_KEYS))}.")
    for key in ("description", "kind", "dtypes", "bytes", "flops", "test_shapes", "bench_shapes"):
        if key not in data:
            raise ConfigError(f"{where}: missing required key `{key}` (see kernels/README.md).")
    kind = data["kind"]
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind = {kind!r}; expected one of {', '.join(KINDS)}.")

    dtypes = _strings(data["dtypes"], where, "dtypes")
    for d in dtypes:
        if d not in ITEMSIZE:
            raise ConfigError(f"{where}: dtype {d!r} is not one of {', '.join(ITEMSIZE)}.")
    bench_dtypes = _strings(data.get("bench_dtypes", dtypes), where, "bench_dtypes")
    if not set(bench_dtypes) <= set(dtypes):
        raise ConfigError(f"{where}: bench_dtypes must be a subset of dtypes {dtypes}.")
    declared: dict[str, tuple[float, float]] = {}
    for d, pair in data.get("tolerances", {}).items():
        if d not in dtypes or not (isinstance(pair, list) and len(pair) == 2):
            raise ConfigError(f"{where}: tolerances.{d} must be [atol, rtol] for one of the op's dtypes.")
        declared[d] = (float(pair[0]), float(pair[1]))
    # The rest from kernellab.ops.tolerances: the table the benchmark's correctness gate reads too.
    tols = {d: tolerances.for_dtype(d, declared) for d in dtypes}

    test_shapes = _shapes(data["test_shapes"], where, "test_shapes")
    bench_shapes = _shapes(data["bench_shapes"], where, "bench_shapes")
    dims = set(test_shapes[0])
    for shape in test_shapes + bench_shapes:
        if set(shape) != dims:
            raise ConfigError(f"{where}: every shape needs the dims {sorted(dims)}; {shape} differs.")

    baselines = _strings(data.get("baselines", ["eager"]), where, "baselines")
    if "eager" not in baselines:
        baselines.insert(0, "eager")
    candidates = data.get("candidates", {"kernellab": name})
    if not candidates or not all(isinstance(v, str) for v in candidates.values()):
        raise ConfigError(f"{where}: candidates must map names to registered op names, "
                          f"e.g. {{ kernellab = \"{name}\" }}.")
    sources = _strings(data["sources"], where, "sources") if "sources" in data else _default_sources(folder, kind)
    for s in sources:
        if not (folder / s).is_file():
            raise ConfigError(f"{where}: source {s!r} does not exist in {folder.name}/.")
    if not sources:
        raise ConfigError(f"{where}: no sources found; add .cu/.cpp files (or kernel.py for Triton).")
    if not (folder / "reference.py").is_file():
        raise ConfigError(f"{where}: the op has no reference.py (see kernels/README.md).")

    seeds = data.get("seeds", DEFAULT_SEEDS)
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers.")
    min_cuda = data.get("min_cuda")
    if min_cuda is not None:
        if not (isinstance(min_cuda, list) and len(min_cuda) == 2 and all(isinstance(v, str) for v in min_cuda)
                and re.fullmatch(r"\d+\.\d+", min_cuda[0])):
            raise ConfigError(f'{where}: min_cuda must be ["X.Y", "what needs it"], e.g. min_cuda = ["12.8", '
                              f'"tcgen05 instructions"].')
        min_cuda = (min_cuda[0], min_cuda[1])
    requires = _requires(data.get("requires", {}), candidates, kind, where)
    backward = backward_spec.parse(data.get("backward"), where=where, folder=folder, candidates=dict(candidates),
                                   dtypes=dtypes, forward_tolerances=tols)
    spec = OpSpec(
        name=name, path=folder, kind=kind, description=str(data["description"]), min_cuda=min_cuda, requires=requires,
        test_shapes=test_shapes, bench_shapes=bench_shapes, dtypes=dtypes, bench_dtypes=bench_dtypes,
        seeds=seeds, tolerances=tols, bytes_expr=str(data["bytes"]), flops_expr=str(data["flops"]),
        baselines=baselines, candidates=dict(candidates), sources=sources, backward=backward,
    )
    # Evaluate the formulas once at every shape now, so a typo fails here and not in a benchmark.
    for shape in test_shapes + bench_shapes:
        for d in dtypes:
            exprs = [("bytes", spec.bytes_expr), ("flops", spec.flops_expr)]
            if backward:
                exprs += [("backward.bytes", backward.bytes_expr), ("backward.flops", backward.flops_expr)]
            for key, expr in exprs:
                try:
                    _evaluate(expr, shape, d)
                except Exception as e:  # any evaluation error is the formula's fault
                    raise ConfigError(f"{where}: {key} = {expr!r} fails at {shape}: {e}") from None
    return spec


def _requires(value: Any, candidates: dict, kind: str, where: str) -> dict[str, str]:
    """op.toml's `requires = { CANDIDATE = "sm_90a" }` as {candidate: "9.0a"}, checked against the
    candidates and matrix.toml's [arch_specific]."""
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: requires must be a table, e.g. requires = {{ wgmma = "sm_90a" }}.')
    from ..image.targets import load

    known = load().arch_specific
    out = {}
    for label, arch in value.items():
        if label not in candidates:
            raise ConfigError(f"{where}: requires names {label!r}, which is not a candidate "
                              f"({', '.join(candidates)}).")
        m = re.fullmatch(r"sm_(\d+)(\d)([af])", str(arch))
        variant = f"{m.group(1)}.{m.group(2)}{m.group(3)}" if m else None
        if kind != "cuda" or variant not in known:
            names = ", ".join("sm_" + v.replace(".", "") for v in known)
            raise ConfigError(f"{where}: requires {label} = {arch!r}: a CUDA op's candidate can require one of {names}.")
        out[label] = variant
    return out


def _default_sources(folder: Path, kind: str) -> list[str]:
    if kind == "triton":
        return ["kernel.py"] if (folder / "kernel.py").is_file() else []
    return sorted(p.name for p in folder.iterdir() if p.suffix in (".cu", ".cpp"))


def _strings(value: Any, where: str, key: str) -> list[str]:
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise ConfigError(f"{where}: {key} must be a non-empty list of strings.")
    return list(value)


def _shapes(value: Any, where: str, key: str) -> list[dict[str, int]]:
    ok = isinstance(value, list) and value and all(
        isinstance(s, dict) and s and all(isinstance(v, int) and v >= 1 for v in s.values()) for s in value
    )
    if not ok:
        raise ConfigError(f"{where}: {key} must be a non-empty list of tables of positive integers, "
                          "e.g. [{ rows = 1, cols = 7 }].")
    return [dict(s) for s in value]


_CODE: dict[str, CodeType] = {}


def _evaluate(expr: str, shape: dict, dtype: str) -> float:
    code = _CODE.get(expr) or _CODE.setdefault(expr, compile(expr, "<op.toml>", "eval"))
    names = {**_EXPR_FUNCS, **shape, "itemsize": ITEMSIZE[dtype]}
    return eval(code, {"__builtins__": {}}, names)


def compile_select(expr: str) -> Callable[[str], bool]:
    """A pytest -k style matcher: words are case-insensitive substrings of the op name."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expr)
    parts = []
    for tok in tokens:
        if tok in ("and", "or", "not", "(", ")"):
            parts.append(tok)
        elif re.fullmatch(r"[\w.\-]+", tok):
            parts.append(f"({tok.lower()!r} in name)")
        else:
            raise ConfigError(f"-k {expr!r}: {tok!r} is not a name; use words, and, or, not, parentheses.")
    try:
        code = compile(" ".join(parts) or "True", "<-k>", "eval")
    except SyntaxError:
        raise ConfigError(f"-k {expr!r} is not a valid expression (words joined by and/or/not).") from None
    return lambda name: bool(eval(code, {"__builtins__": {}}, {"name": name.lower()}))



def op_names(root: Path) -> list[str]:
    """The ops under `root`: folders with an op.toml, not starting with `_` or `.` (as discover)."""
    return sorted(p.name for p in root.iterdir()
                  if (p / "op.toml").is_file() and not p.name.startswith(("_", ".")))


def find_op(root: Path, expr: str) -> Path:
    """The folder of the one op `expr` selects under `root`: its exact name, or a -k expression (as for
    `test` and `bench`) that matches exactly one op; ConfigError naming the candidates otherwise.

    Only the folder is checked, not its op.toml: a watch on an op whose op.toml is broken starts,
    shows the error and waits for the fix.
    """
    if not root.is_dir():
        raise ConfigError(f"no kernels folder at {shown(root)}; run from a kernellab checkout or pass --kernels DIR.")
    names = op_names(root)
    if expr in names:
        return root / expr
    matched = [n for n in names if compile_select(expr)(n)]
    if len(matched) == 1:
        return root / matched[0]
    if matched:
        raise ConfigError(f"-k {expr!r} matches {len(matched)} ops ({', '.join(matched)}); this task works on one: "
                          f"name it, or narrow the expression (e.g. -k '{matched[0]} and not {matched[1]}').")
    close = difflib.get_close_matches(expr, names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(f"no op named `{expr}` in {shown(root)}/{hint}; the ops are: {', '.join(names) or 'none'}.")
