"""Kernel ops: build and load the ops that kernellab.ops.spec finds under kernels/.

Adding an op is adding a folder (kernels/README.md says what goes in it); nothing lists the ops.
The specs (op.toml) are read by kernellab.ops.spec without torch; this module compiles C++/CUDA ops,
imports Triton ones and their reference.py, and is `python -m kernellab.ops build`.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, ExtensionError
from ..image.targets import vkey
from . import compilerlog, extensions
from .spec import DEFAULT_SEEDS, ITEMSIZE, KERNELS, KINDS, OpSpec, discover, parse_spec

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "COMMON", "DEFAULT_SEEDS", "ITEMSIZE", "KERNELS", "KINDS", "BuildOutcome", "OpModule", "OpSpec",
    "build", "build_all", "build_table", "common_dir", "discover", "load", "main", "parse_spec", "unavailable",
    "unbuildable",
]

COMMON = KERNELS / "_common"  # headers shared by all ops; on every op's include path


def common_dir(op: OpSpec) -> Path:
    """The shared headers on the op's include path: `_common/` beside the op's folder (an op copied into
    another kernels folder with its `_common/` builds against that copy), else kernels/_common."""
    beside = op.path.parent / "_common"
    return beside if beside.is_dir() else COMMON


class OpModule:
    """A loaded op: inputs, the reference, the candidate kernels and the baselines.

    Candidates take the op's inputs and an optional `out=` tensor (written in place and returned);
    without one they allocate it. Baselines take the inputs and return a new tensor.
    """

    def __init__(self, spec: OpSpec, reference_module: ModuleType, candidates: dict[str, Callable],
                 build: extensions.Build | None, unavailable: dict[str, str] | None = None):
        self.spec = spec
        self.build = build
        self._ref = reference_module
        self.candidates = candidates
        #: candidates left out here, and why (op.toml's `requires`: see arch_requirements)
        self.unavailable = dict(unavailable or {})
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

    def reference(self, *inputs: Any) -> Tensor:
        """The reference output: computed on float64 copies of the inputs, cast to the inputs' dtype."""
        import torch

        floats = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        wide = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
        return self._ref.reference(*wide).to(floats[0].dtype)

    def new_output(self, *inputs: Any) -> Tensor:
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
    return unbuildable(op) if op.kind == "cuda" and op.min_cuda else None


def unbuildable(op: OpSpec) -> str | None:
    """Why `op` has nothing to build ahead of time here, or None when it can be built."""
    import torch

    if op.kind == "triton":
        return "Triton compiles at the first call"
    if op.kind == "cuda" and torch.version.cuda is None:
        return f"needs a CUDA build of torch (this is {torch.__version__})"
    if op.kind == "cuda" and op.min_cuda and vkey(torch.version.cuda or "0") < vkey(op.min_cuda[0]):
        return f"{op.name} needs CUDA {op.min_cuda[0]} or newer ({op.min_cuda[1]}); this is CUDA {torch.version.cuda}"
    return None


def build(op: OpSpec, *, verbose: bool = False, kernel_library: bool = False) -> extensions.Build:
    """Compile what changed in a C++/CUDA op and load its library (its ops appear under torch.ops).
    kernel_library: its .cu files in a library of their own (extensions.build), for a fresh process."""
    if op.kind == "triton":
        raise ExtensionError(f"{op.name} is a Triton op: there is nothing to compile ahead of time.")
    variants, _ = arch_requirements(op, gpu=False)
    return extensions.build(
        f"kernellab_{op.name}", [op.path / s for s in op.sources],
        cuda=op.kind == "cuda", include_dirs=[common_dir(op)], verbose=verbose, arch_specific=variants,
        kernel_library=kernel_library,
    )


def arch_requirements(op: OpSpec, *, gpu: bool = True) -> tuple[list[str], dict[str, str]]:
    """The arch-specific variants this toolkit builds for the op (op.toml's `requires`, for the archs of
    this build), and why each candidate that requires one cannot run here: the toolkit is too old, the
    build's arch list lacks that arch, or (with `gpu`) this GPU is another one."""
    if not op.requires:
        return [], {}
    import torch

    from ..image.targets import load

    known = load().arch_specific
    cuda = torch.version.cuda or "0"
    try:
        archs = {a.strip().removesuffix("+PTX") for a in extensions.plain_arch_list().replace(" ", ";").split(";")}
    except ExtensionError:
        archs = set()  # no arch list and no GPU: unavailable() says so first
    capability = None
    if gpu and torch.cuda.is_available():
        capability = "{}.{}".format(*torch.cuda.get_device_capability())
    variants, reasons = [], {}
    for label, variant in op.requires.items():
        sm, base = "sm_" + variant.replace(".", ""), variant[:-1]
        if vkey(cuda) < vkey(known[variant]):
            reasons[label] = f"{label} needs {sm} code, which CUDA {known[variant]} or newer builds; this is CUDA {cuda}"
        elif base not in archs:
            reasons[label] = (f"{label} needs {sm} code, but this build's arch list ({';'.join(sorted(archs)) or 'none'}) "
                              f"has no {base}: use a target for GPUs of compute capability {base}")
        else:
            if variant not in variants:
                variants.append(variant)
            same = capability == base if variant.endswith("a") else (capability or "").split(".")[0] == base.split(".")[0]
            if capability is not None and not same:
                reasons[label] = f"{label} needs a GPU of compute capability {base} for its {sm} code; this GPU is {capability}"
    return variants, reasons


@dataclass(frozen=True)
class BuildOutcome:
    """One op's ahead-of-time build: the build, or why there is none (`failed` tells the two apart)."""

    op: OpSpec
    build: extensions.Build | None = None
    note: str = ""
    failed: bool = False


def build_all(select: str | None = None, *, verbose: bool = False, root: Path | None = None) -> list[BuildOutcome]:
    """Build every selected op that has something to build; one op's failure does not stop the others."""
    specs = discover(root, select=select)
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
    names = dict(zip([r.function for r in kernels], compilerlog.demangle([r.function for r in kernels])))
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
            kernel = compilerlog.short_name(names[r.function])
            rows.append((*(first if i == 0 else ("", "", "")), kernel, r.arch, str(r.registers),
                         f"{r.spill_stores}/{r.spill_loads}", str(r.stack_bytes), str(r.shared_bytes)))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    errors = [f"\n{o.op.name}: {o.note}" for o in outcomes if o.failed]
    return "\n".join(lines) + "".join(errors) + _code_lines(outcomes)


def _code_lines(outcomes: list[BuildOutcome]) -> str:
    """Which GPU code each built library holds (cuobjdump --list-elf / --list-ptx), when cuobjdump is here."""
    from . import binaries

    lines = []
    for o in outcomes:
        if o.build is None or o.op.kind != "cuda":
            continue
        f = binaries.fingerprint(o.build.device_code)
        if f.cubins or f.ptx:
            ptx = f"; PTX {' '.join(f.ptx)}" if f.ptx else ""
            lines.append(f"  {o.op.name}: SASS {' '.join(f.cubins) or 'none'}{ptx}")
    return "\n\ncode in each library (cuobjdump):\n" + "\n".join(lines) if lines else ""


_LOADED: dict[tuple[str, str], OpModule] = {}


def load(op: OpSpec, *, verbose: bool = False, kernel_library: bool = False) -> OpModule:
    """Build (if needed) and load an op: its extension or Triton module, and its reference.py
    (kernel_library: see build)."""
    key = (op.name, str(op.path))
    if key in _LOADED:
        return _LOADED[key]
    reference = import_file(op, "reference.py")
    if op.kind == "triton":
        built = None
        namespace: Any = import_file(op, op.sources[0])
    else:
        import torch

        built = build(op, verbose=verbose, kernel_library=kernel_library)
        namespace = getattr(torch.ops, built.name)
    candidates = {}
    _, unavailable = arch_requirements(op) if op.kind == "cuda" else ([], {})
    for label, fn_name in op.candidates.items():
        if label in unavailable:
            continue
        try:
            fn = getattr(namespace, fn_name)
        except (AttributeError, RuntimeError):
            raise ExtensionError(
                f"{op.name}: candidate {label!r} names {fn_name!r}, which the op's sources do not register; "
                f"check op.toml's candidates against the binding's TORCH_LIBRARY block."
            ) from None
        candidates[label] = _writing_out(fn, label, reference)
    module = OpModule(op, reference, candidates, built, unavailable)
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


def import_file(op: OpSpec, filename: str) -> ModuleType:
    path = op.path / filename
    name = f"kernellab_ops.{op.name}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT and dataclasses look modules up by name
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    """`python -m kernellab.ops build [-k EXPR] [-v]`: what `invoke build-kernels` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kernellab.ops", description="Build kernel ops ahead of time.")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("-k", dest="select", metavar="EXPR", help="only ops whose name matches EXPR (like pytest -k)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler output")
    parser.add_argument("--record", metavar="FILE", type=Path,
                        help="also write each op's library hash, SASS hash and archs (kernellab.ops.binaries) as JSON")
    parser.add_argument("--kernels", type=Path, metavar="DIR", help="the kernels folder (default: kernels/)")
    args = parser.parse_args(argv)
    try:
        outcomes = build_all(args.select, verbose=args.verbose, root=args.kernels)
    except (ConfigError, ExtensionError) as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print(build_table(outcomes))
    if args.record:
        args.record.write_text(json.dumps(record(outcomes), indent=1, sort_keys=True) + "\n")
    return 1 if any(o.failed for o in outcomes) else 0


def record(outcomes: list[BuildOutcome]) -> dict[str, Any]:
    """Per op: its library's fingerprint (kernellab.ops.binaries), or why there is none."""
    from . import binaries

    found: dict[str, Any] = {}
    for o in outcomes:
        if o.build is None:
            found[o.op.name] = {"skipped" if not o.failed else "failed": o.note}
        else:
            found[o.op.name] = {"library": o.build.library.name, **binaries.fingerprint(o.build.device_code).to_dict()}
    return found


if __name__ == "__main__":
    sys.exit(main())
