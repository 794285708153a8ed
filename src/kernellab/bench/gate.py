"""The bench's correctness gate: before any timing, each implementation runs once on copies of the inputs and
must match the float64 reference and leave its inputs untouched. A wrong one gets a row saying why, never a time.

- `check`: the forward (the output, at the op's tolerances).
- `Case`: one op at one shape and dtype, what every implementation is checked against (and called with).
- `check_gradients`: the backward and full passes of an op with a [backward]: one full pass through autograd
  (kernellab.ops.passes.run_full), its output at the forward tolerances and every input's gradient at the
  backward tolerances, the mismatch naming the input. An implementation whose output carries no autograd graph
  (a baseline or adapter without a backward) is "skipped".
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..ops import tolerances

#: (status, reason): "ok", "wrong", "error" or "skipped", and why.
Verdict = tuple[str, str]


def check(fn: Callable[..., Any], inputs: tuple, expected: Any, *, atol: float, rtol: float) -> Verdict:
    """("ok", "") if fn(*inputs) matches expected and leaves its inputs untouched, else why not."""
    import torch

    # Run on copies, so an implementation that writes into its inputs cannot spoil the others' check.
    work = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    try:
        out = fn(*work)
        _sync(work)
    except Exception as e:  # an implementation that raises gets a row saying so
        return "error", oneline(e)
    for i, (a, b) in enumerate(zip(inputs, work)):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b):
            return "wrong", f"input {i} was modified"
    try:
        torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)  # as strict as the tests: dtype too
    except AssertionError as e:
        return "wrong", f"does not match reference (atol={atol:g}, rtol={rtol:g}): {oneline(e, 3)}"
    return "ok", ""


def check_gradients(fn: Callable[..., Any], inputs: tuple, grad_out: Any, expected: Any, wanted: Sequence[Any],
                    indices: Sequence[int], names: Sequence[str], *, forward_tol: tuple[float, float],
                    backward_tol: tuple[float, float]) -> Verdict:
    """("ok", "") if one forward and backward of fn through autograd gives the reference's output and the
    gradients `wanted` (for the inputs at `indices`, called `names`), its inputs untouched; else why not."""
    import torch

    from ..ops import passes

    work = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    incoming = grad_out.clone()
    try:
        out, grads = passes.run_full(fn, work, incoming, indices)
        _sync(work)
    except passes.NoBackward as e:
        return "skipped", str(e)
    except Exception as e:
        return "error", oneline(e)
    for i, (a, b) in enumerate(zip(inputs, work)):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b):
            return "wrong", f"input {i} was modified"
    if not torch.equal(incoming, grad_out):
        return "wrong", "grad_out was modified"
    atol, rtol = forward_tol
    try:
        torch.testing.assert_close(out.detach(), expected, atol=atol, rtol=rtol)
    except AssertionError as e:
        return "wrong", f"output does not match reference (atol={atol:g}, rtol={rtol:g}): {oneline(e, 3)}"
    atol, rtol = backward_tol
    for name, got, want in zip(names, grads, wanted):
        try:
            torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
        except AssertionError as e:
            return "wrong", f"gradient of {name} does not match autograd on the reference (atol={atol:g}, " \
                            f"rtol={rtol:g}): {oneline(e, 3)}"
    return "ok", ""


class Case:
    """One op at one shape and dtype: its inputs, the reference's output, and for a backward the incoming
    gradient and the reference's gradients (float64 autograd)."""

    def __init__(self, spec: Any, module: Any, shape: dict[str, int], dtype: str, device: str):
        self.spec, self.module, self.shape, self.dtype, self.device = spec, module, shape, dtype, device
        seed = spec.seeds[0] if spec.seeds else 0
        self.inputs = module.make_inputs(shape, dtype, device, seed)
        self.expected = module.reference(*self.inputs)
        # The same (atol, rtol) as tests/test_kernels.py: the op's [tolerances], else kernellab.ops.tolerances.
        self.tol = tolerances.for_dtype(dtype, spec.tolerances)
        self.verdicts: dict[str, Verdict] = {}  # impl -> its gradient check, shared by backward and full
        if getattr(spec, "backward", None) is not None:
            from ..ops import passes

            self.grad_out = module.make_grad_out(self.expected, seed)
            self.indices = module.grad_indices(self.inputs)
            self.names = passes.grad_names(spec, self.indices)
            self.wanted = module.reference_grads(self.inputs, self.grad_out)
            self.backward_tol = spec.backward.tolerances.get(dtype, self.tol)

    def check(self, name: str, fn: Callable[..., Any], which: str) -> Verdict:
        if which == "forward":
            atol, rtol = self.tol
            return check(fn, self.inputs, self.expected, atol=atol, rtol=rtol)
        if name not in self.verdicts:
            self.verdicts[name] = check_gradients(
                fn, self.inputs, self.grad_out, self.expected, self.wanted, self.indices, self.names,
                forward_tol=self.tol, backward_tol=self.backward_tol)
        return self.verdicts[name]

    def call(self, fn: Callable[..., Any], which: str) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
        """(call, setup) timing pass `which` of fn (kernellab.ops.passes.prepare)."""
        from ..ops import passes

        if which == "forward":
            return (lambda: fn(*self.inputs)), None
        return passes.prepare(fn, self.inputs, which, self.grad_out, self.indices)


def _sync(tensors: Sequence[Any]) -> None:
    import torch

    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in tensors):
        torch.cuda.synchronize()


def oneline(e: BaseException, lines: int = 1) -> str:
    text = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: " + "; ".join(text[:lines]) if text else type(e).__name__
