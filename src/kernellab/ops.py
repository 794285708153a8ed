"""Kernel ops: one folder per op under kernels/, described by its op.toml and loaded on demand.

Adding an op is adding a folder (kernels/README.md says what goes in it); nothing lists the ops.
discover() reads only TOML, so listing and selecting ops never imports torch.
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any, Callable

from . import ROOT, extensions
from .errors import ConfigError, ExtensionError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

if TYPE_CHECKING:
    from torch import Tensor

KINDS = ("cuda", "cpu", "triton")
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
#: Starting tolerances (atol, rtol) from docs/bench-method.md; an op.toml may override per dtype.
DEFAULT_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
}
DEFAULT_SEEDS = [0, 1, 2]
KERNELS = ROOT / "kernels"
COMMON = KERNELS / "_common"  # headers shared by all ops; on every op's include path
_KEYS = {
    "description", "kind", "sources", "candidates", "dtypes", "bench_dtypes", "seeds", "tolerances",
    "bytes", "flops", "baselines", "test_shapes", "bench_shapes",
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

    def __hash__(self) -> int:
        return hash((self.name, str(self.path)))

    def bytes_moved(self, shape: dict, dtype: str) -> int:
        """Fewest bytes the op must move through device memory at this shape and dtype."""
        return int(_evaluate(self.bytes_expr, shape, dtype))

    def flops(self, shape: dict, dtype: str) -> int:
        """Floating-point operations the op does at this shape and dtype."""
        return int(_evaluate(self.flops_expr, shape, dtype))

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
        matcher = _compile_select(select)
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
    tolerances = {d: DEFAULT_TOLERANCES[d] for d in dtypes}
    for d, pair in data.get("tolerances", {}).items():
        if d not in dtypes or not (isinstance(pair, list) and len(pair) == 2):
            raise ConfigError(f"{where}: tolerances.{d} must be [atol, rtol] for one of the op's dtypes.")
        tolerances[d] = (float(pair[0]), float(pair[1]))

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
    spec = OpSpec(
        name=name, path=folder, kind=kind, description=str(data["description"]),
        test_shapes=test_shapes, bench_shapes=bench_shapes, dtypes=dtypes, bench_dtypes=bench_dtypes,
        seeds=seeds, tolerances=tolerances, bytes_expr=str(data["bytes"]), flops_expr=str(data["flops"]),
        baselines=baselines, candidates=dict(candidates), sources=sources,
    )
    # Evaluate the formulas once at every shape now, so a typo fails here and not in a benchmark.
    for shape in test_shapes + bench_shapes:
        for d in dtypes:
            for key, expr in (("bytes", spec.bytes_expr), ("flops", spec.flops_expr)):
                try:
                    _evaluate(expr, shape, d)
                except Exception as e:  # any evaluation error is the formula's fault
                    raise ConfigError(f"{where}: {key} = {expr!r} fails at {shape}: {e}") from None
    return spec


class OpModule:
    """A loaded op: inputs, the reference, the candidate kernels and the baselines.

    Candidates take the op's inputs and an optional `out=` tensor (written in place and returned);
    without one they allocate it. Baselines take the inputs and return a new tensor.
    """

    def __init__(self, spec: OpSpec, reference_module: ModuleType, candidates: dict[str, Callable],
                 build: extensions.Build | None):
        self.spec = spec
        self.build = build
        self._ref = reference_module
        self.candidates = candidates
        self.baselines: dict[str, Callable] = {}
        for name in spec.baselines:
            if name == "eager":
                self.baselines[name] = reference_module.reference
            elif name == "compile":
                self.baselines[name] = _compiled(reference_module.reference)
            elif callable(getattr(reference_module, f"baseline_{name}", None)):
                self.baselines[name] = getattr(reference_module, f"baseline_{name}")
            else:
                raise ConfigError(f"{spec.name}: baseline {name!r} is declared in op.toml, "
                                  f"but reference.py has no function baseline_{name}().")

    def make_inputs(self, shape: dict, dtype: str, device: str, seed: int) -> tuple:
        """Fresh random inputs (never zeros) for one shape, dtype, device and seed."""
        import torch

        generator = torch.Generator(device=device).manual_seed(seed)
        return tuple(self._ref.make_inputs(shape, getattr(torch, dtype), device, generator))

    def reference(self, *inputs: Any) -> "Tensor":
        """The reference output: computed on float64 copies of the inputs, cast to the inputs' dtype."""
        import torch

        floats = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        wide = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
        return self._ref.reference(*wide).to(floats[0].dtype)

    def new_output(self, *inputs: Any) -> "Tensor":
        """An uninitialised output tensor for these inputs."""
        import torch

        make = getattr(self._ref, "empty_output", None)
        return make(*inputs) if make is not None else torch.empty_like(inputs[0])

    def shape_errors(self, *inputs: Any) -> list[tuple[tuple, str]]:
        """Inputs with a shape mistake, each with a pattern the op's error message must match."""
        make = getattr(self._ref, "shape_errors", None)
        return list(make(*inputs)) if make is not None else []


def unavailable(op: OpSpec) -> str | None:
    """Why `op` cannot run on this machine (a sentence saying what is missing), or None."""
    import torch

    if op.needs_gpu and not torch.cuda.is_available():
        how = "CPU-only" if torch.version.cuda is None else "with CUDA, but no GPU is visible"
        return (f"{op.name} needs a CUDA GPU: torch {torch.__version__} is {how} "
                "(run on a GPU machine, or `invoke test` with a GPU target).")
    if op.kind == "triton" and importlib.util.find_spec("triton") is None:
        return f"{op.name} needs triton, which is not installed (pip install triton, or use a GPU image)."
    return None


def unbuildable(op: OpSpec) -> str | None:
    """Why `op` has nothing to build ahead of time here, or None when it can be built."""
    import torch

    if op.kind == "triton":
        return "Triton compiles at the first call"
    if op.kind == "cuda" and torch.version.cuda is None:
        return f"needs a CUDA build of torch (this is {torch.__version__})"
    return None


def build(op: OpSpec, *, verbose: bool = False) -> extensions.Build:
    """Compile what changed in a C++/CUDA op and load its library (its ops appear under torch.ops)."""
    if op.kind == "triton":
        raise ExtensionError(f"{op.name} is a Triton op: there is nothing to compile ahead of time.")
    return extensions.build(
        f"kernellab_{op.name}", [op.path / s for s in op.sources],
        cuda=op.kind == "cuda", include_dirs=[COMMON], verbose=verbose,
    )


@dataclass(frozen=True)
class BuildOutcome:
    """One op's ahead-of-time build: the build, or why there is none (`failed` tells the two apart)."""

    op: OpSpec
    build: extensions.Build | None = None
    note: str = ""
    failed: bool = False


def build_all(select: str | None = None, *, verbose: bool = False) -> list[BuildOutcome]:
    """Build every selected op that has something to build; one op's failure does not stop the others."""
    specs = discover(select=select)
    if not specs:
        raise ConfigError(f"no op matches -k {select!r}; the ops are the folders under kernels/ with an op.toml.")
    outcomes = []
    for op in specs:
        reason = unbuildable(op)
        if reason:
            outcomes.append(BuildOutcome(op, note=reason))
            continue
        try:
            outcomes.append(BuildOutcome(op, build(op, verbose=verbose)))
        except ExtensionError as e:
            outcomes.append(BuildOutcome(op, note=str(e), failed=True))
    return outcomes


def build_table(outcomes: list[BuildOutcome]) -> str:
    """A table of compile time and, per kernel, registers, spills, stack and shared memory (ptxas -v)."""
    kernels = [r for o in outcomes if o.build for r in o.build.resources]
    names = dict(zip([r.function for r in kernels], extensions.demangle([r.function for r in kernels])))
    header = ("op", "status", "seconds", "kernel", "arch", "regs", "spill st/ld", "stack", "smem")
    rows: list[tuple[str, ...]] = []
    for o in outcomes:
        if o.build is None:
            note = "" if o.failed else o.note
            rows.append((o.op.name, "FAILED" if o.failed else "skipped", "", note, "", "", "", "", ""))
            continue
        status = "compiled" if o.build.compiled else "cached"
        first = (o.op.name, status, f"{o.build.seconds:.1f}")
        if not o.build.resources:
            rows.append((*first, "(no GPU kernels)", "", "", "", "", ""))
        for i, r in enumerate(o.build.resources):
            kernel = extensions.short_name(names[r.function])
            rows.append((*(first if i == 0 else ("", "", "")), kernel, r.arch, str(r.registers),
                         f"{r.spill_stores}/{r.spill_loads}", str(r.stack_bytes), str(r.shared_bytes)))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    errors = [f"\n{o.op.name}: {o.note}" for o in outcomes if o.failed]
    return "\n".join(lines) + "".join(errors)


_LOADED: dict[tuple[str, str], OpModule] = {}


def load(op: OpSpec, *, verbose: bool = False) -> OpModule:
    """Build (if needed) and load an op: its extension or Triton module, and its reference.py."""
    key = (op.name, str(op.path))
    if key in _LOADED:
        return _LOADED[key]
    reference = _import(op, "reference.py")
    if op.kind == "triton":
        built = None
        namespace: Any = _import(op, op.sources[0])
    else:
        import torch

        built = build(op, verbose=verbose)
        namespace = getattr(torch.ops, built.name)
    candidates = {}
    for label, fn_name in op.candidates.items():
        try:
            fn = getattr(namespace, fn_name)
        except (AttributeError, RuntimeError):
            raise ExtensionError(
                f"{op.name}: candidate {label!r} names {fn_name!r}, which the op's sources do not register; "
                f"check op.toml's candidates against the binding's TORCH_LIBRARY block."
            ) from None
        candidates[label] = _writing_out(fn, label, reference)
    module = OpModule(op, reference, candidates, built)
    _LOADED[key] = module
    return module


def _compiled(fn: Callable) -> Callable:
    """torch.compile(fn), created at the first call: importing dynamo costs seconds that tests don't need."""
    compiled: list[Callable] = []

    def call(*inputs: Any) -> Any:
        if not compiled:
            import torch

            compiled.append(torch.compile(fn))
        return compiled[0](*inputs)

    call.__name__ = f"compiled_{fn.__name__}"
    return call


def _writing_out(fn: Callable, label: str, reference: ModuleType) -> Callable:
    """Wrap an out-variant kernel `fn(*inputs, out)` as `call(*inputs, out=None) -> out`."""
    import torch

    make = getattr(reference, "empty_output", None) or (lambda *inputs: torch.empty_like(inputs[0]))

    def call(*inputs: Any, out: Tensor | None = None) -> Tensor:
        if out is None:
            out = make(*inputs)
        fn(*inputs, out)
        return out

    call.__name__ = label
    return call


def _import(op: OpSpec, filename: str) -> ModuleType:
    path = op.path / filename
    name = f"kernellab_ops.{op.name}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT and dataclasses look modules up by name
    spec.loader.exec_module(module)
    return module


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


def _compile_select(expr: str) -> Callable[[str], bool]:
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


def main(argv: list[str] | None = None) -> int:
    """`python -m kernellab.ops build [-k EXPR] [-v]`: what `invoke build-kernels` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kernellab.ops", description="Build kernel ops ahead of time.")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("-k", dest="select", metavar="EXPR", help="only ops whose name matches EXPR (like pytest -k)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler output")
    args = parser.parse_args(argv)
    try:
        outcomes = build_all(args.select, verbose=args.verbose)
    except (ConfigError, ExtensionError) as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print(build_table(outcomes))
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
