"""The torch side of an op's backward (op.toml's [backward], kernellab.ops.backward): which inputs get a
gradient, the reference's gradients by autograd, a candidate as a torch.autograd.Function, and the three
passes (forward, backward, full) as the no-argument calls that the bench times and profile/sanitize run.

A candidate's backward is an out-variant like its forward: `NAME_backward(grad_out, *inputs, out, *grads)`
writes the gradient of every input that gets one (in argument order) into `grads`. kernellab.ops.library
wraps it as `backwards[label](grad_out, *inputs, out=out, grads=None) -> tuple of grads`, and `autograd`
here makes forward and backward one differentiable function, which is how the bench times it: every
implementation (candidate, eager, torch.compile, a recipe's adapter) goes through torch.autograd alike.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ConfigError
from .backward import PASSES
from .spec import OpSpec

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["PASSES", "autograd", "grad_indices", "grad_names", "prepare", "reference_grads", "run_full"]

#: Added to the case's seed for grad_out's generator, so that grad_out is not the inputs' random stream again.
GRAD_SEED = 1_000_003


class NoBackward(ConfigError):
    """An implementation whose output is not differentiable (a baseline or adapter without a backward)."""


def grad_indices(spec: OpSpec, inputs: Sequence[Any]) -> list[int]:
    """Positions of the inputs that get a gradient: op.toml's backward.grads, else every floating-point tensor."""
    import torch

    back = spec.backward
    if back is None:
        raise ConfigError(f"{spec.name} declares no [backward] in its op.toml.")
    if back.grads:
        return [back.params.index(name) for name in back.grads]
    return [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def grad_names(spec: OpSpec, indices: Sequence[int]) -> list[str]:
    """The reference's names of those inputs (`input 3` where reference() has fewer arguments)."""
    params = spec.backward.params if spec.backward else ()
    return [params[i] if i < len(params) else f"input {i}" for i in indices]


def make_grad_out(reference_module: Any, out: Tensor, seed: int) -> Tensor:
    """The incoming gradient for a case: reference.py's make_grad_out(out, gen) if it has one, else N(0, 1)."""
    import torch

    gen = torch.Generator(device=out.device).manual_seed(seed + GRAD_SEED)
    make = getattr(reference_module, "make_grad_out", None)
    if make is not None:
        return make(out, gen)
    return torch.randn(out.shape, dtype=out.dtype, device=out.device, generator=gen)


def reference_grads(reference: Callable[..., Tensor], inputs: Sequence[Any], grad_out: Tensor,
                    indices: Sequence[int]) -> list[Tensor]:
    """The gradients of reference(*inputs) for the inputs at `indices`, by autograd on float64 copies, each
    cast to its input's dtype."""
    import torch

    wide = [t.detach().double().requires_grad_(i in indices) if isinstance(t, torch.Tensor) and t.is_floating_point()
            else t for i, t in enumerate(inputs)]
    out = reference(*wide)
    grads = torch.autograd.grad(out, [wide[i] for i in indices], grad_out.double())
    return [g.to(inputs[i].dtype) for i, g in zip(indices, grads)]


def autograd(forward: Callable[..., Tensor], backward: Callable[..., Sequence[Tensor]],
             indices: Sequence[int]) -> Callable[..., Tensor]:
    """forward(*inputs) -> out and backward(grad_out, *inputs, out=out) -> grads as one differentiable function
    (a torch.autograd.Function): its gradients for the inputs at `indices`, None for the rest."""
    import torch

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: Any) -> Tensor:
            out = forward(*inputs)
            ctx.save_for_backward(*[t for t in inputs if isinstance(t, torch.Tensor)], out)
            ctx.others = [None if isinstance(t, torch.Tensor) else t for t in inputs]
            return out

        @staticmethod
        def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
            *tensors, out = ctx.saved_tensors
            it = iter(tensors)
            inputs = [next(it) if other is None else other for other in ctx.others]
            grads = backward(grad_out.contiguous(), *inputs, out=out)
            result: list[Tensor | None] = [None] * len(inputs)
            for i, g in zip(indices, grads):
                result[i] = g
            return tuple(result)

    def call(*inputs: Any) -> Tensor:
        return Op.apply(*inputs)

    call.__name__ = getattr(forward, "__name__", "op")
    return call


def leaves(inputs: Sequence[Any], indices: Sequence[int]) -> list[Any]:
    """The inputs as autograd leaves: those at `indices` require a gradient (sharing the inputs' storage)."""
    import torch

    return [t.detach().requires_grad_(i in indices) if isinstance(t, torch.Tensor) else t
            for i, t in enumerate(inputs)]


def run_full(fn: Callable[..., Tensor], inputs: Sequence[Any], grad_out: Tensor,
             indices: Sequence[int]) -> tuple[Tensor, tuple[Tensor, ...]]:
    """One full pass: fn's output and its gradients for the inputs at `indices` (ConfigError when fn's output
    carries no autograd graph: an implementation without a backward)."""
    import torch

    ins = leaves(inputs, indices)
    out = fn(*ins)
    if not (isinstance(out, torch.Tensor) and out.grad_fn is not None):
        raise NoBackward("no backward: its output carries no autograd graph")
    return out, torch.autograd.grad(out, [ins[i] for i in indices], grad_out)


def prepare(fn: Callable[..., Any], inputs: Sequence[Any], which: str, grad_out: Tensor | None = None,
            indices: Sequence[int] = ()) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """(call, setup) that time pass `which` of fn at these inputs, both without arguments; run setup (when not
    None) before every call, untimed:
    forward: fn(*inputs), no autograd graph; no setup.
    backward: torch.autograd.grad of the output of the forward that setup ran (a graph is consumed by its
      backward: torch.compile's backward refuses retain_graph, and a kept graph is not what training runs).
    full: a forward with its graph, then torch.autograd.grad; no setup.
    Raises NoBackward where fn's output carries no graph."""
    import torch

    if which == "forward":
        return (lambda: fn(*inputs)), None
    if which not in PASSES or grad_out is None:
        raise ConfigError(f"pass {which!r}: expected one of {', '.join(PASSES)}, with a grad_out for the backward.")
    ins = leaves(inputs, indices)
    wrt = [ins[i] for i in indices]
    run_full(fn, inputs, grad_out, indices)  # says NoBackward here, not in the timing loop
    if which == "full":
        return (lambda: torch.autograd.grad(fn(*ins), wrt, grad_out)), None
    graphs: list[Tensor] = []

    def setup() -> None:
        graphs.append(fn(*ins))

    def call() -> Any:
        return torch.autograd.grad(graphs.pop(), wrt, grad_out)

    return call, setup


def for_impl(module: Any, name: str, fn: Callable[..., Any], inputs: Sequence[Any], which: str,
             seed: int = 0) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """(call, setup) running pass `which` of implementation `name` of a loaded op (`fn`: the candidate or
    baseline as the op module has it), as the bench times it: what `profile` and `sanitize` launch."""
    if which == "forward":
        return (lambda: fn(*inputs)), None
    spec = module.spec
    if spec.backward is None:
        raise ConfigError(f"{spec.name} has no {which} pass: its op.toml declares no [backward].")
    if name in getattr(module, "backwards", {}):
        fn = module.differentiable(name, tuple(inputs))
    elif name in module.candidates:
        raise ConfigError(f"{spec.name}'s candidate {name} has no backward (op.toml's [backward] candidates).")
    grad_out = module.make_grad_out(module.reference(*inputs), seed)
    return prepare(fn, inputs, which, grad_out, module.grad_indices(tuple(inputs)))
