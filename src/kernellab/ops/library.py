"""Kernel ops: load the ops that kernellab.ops.spec finds under kernels/, and the one face of kernellab.ops.

Adding an op is adding a folder (kernels/README.md says what goes in it); nothing lists the ops.
The specs (op.toml) are read by kernellab.ops.spec without torch; kernellab.ops.builds compiles C++/CUDA ops
(and is `python -m kernellab.ops build`); this module loads them, imports Triton ones and their reference.py,
and says why an op cannot run here. Its names include spec's and builds' (`__all__`), so a caller imports one module.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from .. import cache_root
from ..errors import ConfigError, ExtensionError
from . import extensions, passes
from .builds import (
    COMMON,
    BuildOutcome,
    arch_requirements,
    build,
    build_all,
    build_table,
    common_dir,
    kernel_sources,
    main,
    record,
    unbuildable,
)
from .spec import DEFAULT_SEEDS, ITEMSIZE, KERNELS, KINDS, OpSpec, discover, parse_spec

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "COMMON", "DEFAULT_SEEDS", "ITEMSIZE", "KERNELS", "KINDS", "BuildOutcome", "OpModule", "OpSpec",
    "arch_requirements", "build", "build_all", "build_table", "common_dir", "discover", "kernel_sources", "load", "main",
    "parse_spec", "record", "unavailable", "unbuildable",
]


class OpModule:
    """A loaded op: inputs, the reference, the candidate kernels and the baselines.

    Candidates take the op's inputs and an optional `out=` tensor (written in place and returned);
    without one they allocate it. Baselines take the inputs and return a new tensor. An op with a
    [backward] has `backwards`: label -> `call(grad_out, *inputs, out=out, grads=None) -> grads`, the
    gradients of the inputs that get one (kernellab.ops.passes.grad_indices), written into `grads` when given.
    """

    def __init__(self, spec: OpSpec, reference_module: ModuleType, candidates: dict[str, Callable],
                 build: extensions.Build | None, unavailable: dict[str, str] | None = None,
                 backwards: dict[str, Callable] | None = None):
        self.spec = spec
        self.build = build
        self._ref = reference_module
        self.candidates = candidates
        self.backwards = dict(backwards or {})
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

    def make_grad_out(self, out: Tensor, seed: int) -> Tensor:
        """The incoming gradient for a backward at this case (reference.py's make_grad_out, else N(0, 1))."""
        return passes.make_grad_out(self._ref, out, seed)

    def reference_grads(self, inputs: tuple, grad_out: Tensor) -> list[Tensor]:
        """The reference's gradients (float64 autograd, cast to each input's dtype), in grad_indices' order."""
        return passes.reference_grads(self._ref.reference, inputs, grad_out, self.grad_indices(inputs))

    def grad_indices(self, inputs: tuple) -> list[int]:
        """Positions of the inputs that get a gradient."""
        return passes.grad_indices(self.spec, inputs)

    def differentiable(self, label: str, inputs: tuple) -> Callable[..., Tensor]:
        """Candidate `label` forward and backward as one torch.autograd.Function (what the bench times)."""
        return passes.autograd(self.candidates[label], self.backwards[label], self.grad_indices(inputs))

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
        fn = _registered(op, namespace, label, fn_name)
        candidates[label] = _writing_out(fn, label, reference)
    backwards = {}
    for label, fn_name in (op.backward.candidates if op.backward else {}).items():
        if label in candidates:
            backwards[label] = _writing_grads(_registered(op, namespace, label, fn_name), label, op)
    module = OpModule(op, reference, candidates, built, unavailable, backwards)
    _LOADED[key] = module
    return module


def _registered(op: OpSpec, namespace: Any, label: str, fn_name: str) -> Callable:
    try:
        return getattr(namespace, fn_name)
    except (AttributeError, RuntimeError):
        raise ExtensionError(
            f"{op.name}: candidate {label!r} names {fn_name!r}, which the op's sources do not register; "
            f"check op.toml's candidates (and [backward] candidates) against the binding's KL_LIBRARY block."
        ) from None


def _writing_grads(fn: Callable, label: str, op: OpSpec) -> Callable:
    """Wrap a backward out-variant `fn(grad_out, *inputs, out, *grads)` as
    `call(grad_out, *inputs, out, grads=None) -> grads` (allocated like their inputs when not given)."""
    import torch

    def call(grad_out: Tensor, *inputs: Any, out: Tensor, grads: Any = None) -> tuple:
        if grads is None:
            grads = [torch.empty_like(inputs[i]) for i in passes.grad_indices(op, inputs)]
        fn(grad_out, *inputs, out, *grads)
        return tuple(grads)

    call.__name__ = f"{label}_backward"
    return call


def _compiled(fn: Callable) -> Callable:
    """torch.compile(fn), created at the first call: importing dynamo costs seconds that tests don't need."""
    compiled: list[Callable] = []

    def call(*inputs: Any) -> Any:
        if not compiled:
            import torch

            # Inductor's compiled graphs in kernellab's cache (a host folder in containers), not in /tmp: a later
            # bench, a container's or a cluster task's, takes them from there instead of compiling again.
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
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


if __name__ == "__main__":
    sys.exit(main())
