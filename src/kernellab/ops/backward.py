"""An op's backward as its op.toml declares it: the `[backward]` table, read without torch.

An op with a backward has, in op.toml:

    [backward]
    bytes = "(3 * rows * cols + 2 * cols) * itemsize"   # required: fewest bytes the backward moves
    flops = "6 * rows * cols"                           # required: its FLOPs
    grads = ["x", "weight"]      # optional: reference() arguments that get a gradient (default: every
                                 # floating-point tensor input), in argument order
    candidates = { kernellab = "myop_backward" }   # optional: forward candidate -> registered backward op
                                                   # (default: each candidate's op name + "_backward")
    [backward.tolerances]        # optional per dtype [atol, rtol] for the gradients (default: the forward's)
    float32 = [1e-4, 1e-4]

and each backward op `NAME_backward(grad_out, *inputs, out, *grads)` writes the gradient of every input
in `grads` (kernels/README.md, docs/kernels.md). The torch side (the autograd wrapper, the reference's
gradients, the three passes the bench times) is kernellab.ops.passes.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import tolerances

#: The passes an op with a backward is timed in; an op without one has "forward" only.
PASSES = ("forward", "backward", "full")
_KEYS = {"bytes", "flops", "grads", "candidates", "tolerances"}


@dataclass(frozen=True)
class BackwardSpec:
    """op.toml's [backward]."""

    bytes_expr: str
    flops_expr: str
    #: forward candidate label -> the op its binding registers for the backward (or a Triton module's function)
    candidates: dict[str, str]
    #: dtype -> (atol, rtol) for the gradients
    tolerances: dict[str, tuple[float, float]]
    #: reference() arguments that get a gradient, in argument order; () = every floating-point tensor input
    grads: tuple[str, ...] = ()
    #: reference()'s argument names (messages name an input by them)
    params: tuple[str, ...] = field(default=())


def parse(data: Any, *, where: str, folder: Path, candidates: dict[str, str], dtypes: list[str],
          forward_tolerances: dict[str, tuple[float, float]]) -> BackwardSpec | None:
    """op.toml's `backward` value (None when absent) as a BackwardSpec; ConfigError naming the key otherwise."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f'{where}: backward must be a table: [backward] with bytes = "...", flops = "..." '
                          "(kernels/README.md).")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) backward.{', backward.'.join(unknown)}; allowed: "
                          f"{', '.join(sorted(_KEYS))}.")
    for key in ("bytes", "flops"):
        if not isinstance(data.get(key), str):
            raise ConfigError(f"{where}: backward.{key} is required: a Python expression over the dims and "
                              f"`itemsize`, the {'bytes the backward moves' if key == 'bytes' else 'FLOPs it does'}.")
    params = reference_params(folder / "reference.py", where)
    grads = data.get("grads", [])
    if not (isinstance(grads, list) and all(isinstance(g, str) for g in grads)):
        raise ConfigError(f'{where}: backward.grads must be a list of reference() arguments, e.g. ["x", "weight"].')
    for g in grads:
        if g not in params:
            raise ConfigError(f"{where}: backward.grads names {g!r}, which is not an argument of reference() "
                              f"({', '.join(params)}).")
    labels = data.get("candidates", {label: f"{op}_backward" for label, op in candidates.items()})
    if not (isinstance(labels, dict) and labels and all(isinstance(v, str) for v in labels.values())):
        raise ConfigError(f'{where}: backward.candidates must map candidates to registered backward ops, e.g. '
                          f'{{ {next(iter(candidates))} = "{next(iter(candidates.values()))}_backward" }}.')
    for label in labels:
        if label not in candidates:
            raise ConfigError(f"{where}: backward.candidates names {label!r}, which is not a candidate "
                              f"({', '.join(candidates)}).")
    declared: dict[str, tuple[float, float]] = {}
    for d, pair in data.get("tolerances", {}).items():
        if d not in dtypes or not (isinstance(pair, list) and len(pair) == 2):
            raise ConfigError(f"{where}: backward.tolerances.{d} must be [atol, rtol] for one of the op's dtypes.")
        declared[d] = (float(pair[0]), float(pair[1]))
    tols = {d: tolerances.for_dtype(d, declared) if d in declared else forward_tolerances[d] for d in dtypes}
    ordered = tuple(p for p in params if p in grads)
    return BackwardSpec(bytes_expr=data["bytes"], flops_expr=data["flops"], candidates=dict(labels),
                        tolerances=tols, grads=ordered, params=params)


def reference_params(path: Path, where: str) -> tuple[str, ...]:
    """The argument names of `def reference(...)` in reference.py, read with ast (nothing imported)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError) as e:
        raise ConfigError(f"{where}: cannot read reference.py for the backward's arguments ({e}).") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "reference":
            return tuple(a.arg for a in node.args.posonlyargs + node.args.args)
    raise ConfigError(f"{where}: reference.py has no `def reference(...)`; the backward's grads name its arguments.")
