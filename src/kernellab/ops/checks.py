"""The checks every op must pass, in one place: `tests/test_kernels.py` runs them as test cases and
`invoke watch` (kernellab.watch) reruns them on every save.

- `match_reference`: one candidate at one test shape, dtype and seed against the reference, the output
  pre-filled with NaN (an element the kernel forgets to write cannot pass by luck), the inputs checked
  unchanged, with the op's tolerances.
- `match_gradients`: an op with a [backward]: one backward candidate's gradients against autograd on the
  reference (float64), for every input that gets one, each pre-filled with NaN, its arguments checked
  unchanged, with the op's backward tolerances.
- `rejects_bad_input`: a wrong dtype, device or a non-contiguous first input must raise with a message
  naming the problem (`BAD_INPUTS`).
- `rejects_bad_shapes`: a wrong-shaped `out` and the op's own `shape_errors` must raise.

Each returns None when the check passes, else one message saying what went wrong; for a mismatch it
names the first element that differs (`first_mismatch`). Imports torch; callers that list ops
without torch use kernellab.ops.spec.
"""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import ConfigError
from .spec import OpSpec

if TYPE_CHECKING:
    from torch import Tensor

    from .library import OpModule

#: A case of `match_reference`: (candidate label, shape, dtype, seed).
Case = tuple[str, dict, str, int]


def device(op: OpSpec) -> str:
    """Where the op's tensors live: "cuda" for CUDA and Triton ops, else "cpu"."""
    return "cuda" if op.needs_gpu else "cpu"


def cases(op: OpSpec) -> Iterator[Case]:
    """Every (candidate, test shape, dtype, seed) of the op, in the order the tests list them."""
    for label in op.candidates:
        for shape in op.test_shapes:
            for dtype in op.dtypes:
                for seed in op.seeds:
                    yield label, shape, dtype, seed


def gradient_cases(op: OpSpec) -> Iterator[Case]:
    """Every (backward candidate, test shape, dtype, seed) of an op with a [backward]; none without one."""
    for label in op.backward.candidates if op.backward else {}:
        for shape in op.test_shapes:
            for dtype in op.dtypes:
                for seed in op.seeds:
                    yield label, shape, dtype, seed


def match_gradients(op: OpSpec, module: OpModule, label: str, shape: dict, dtype: str, seed: int) -> str | None:
    """None if candidate `label`'s backward gives the reference's gradients at this case, else why not.

    The backward gets the reference's output as `out` (so a failure here is the backward's), a grad_out
    from the case's seed, and gradients pre-filled with NaN; a mismatch names the input and its worst element.
    """
    import torch

    from . import passes

    inputs, _, expected, _ = _reference_side(op, module, shape, dtype, seed)
    grad_out = module.make_grad_out(expected, seed)
    indices = module.grad_indices(inputs)
    wanted = module.reference_grads(inputs, grad_out)
    grads = [torch.full_like(inputs[i], float("nan")) for i in indices]
    args = [grad_out, *inputs, expected]
    before = [t.clone() for t in _tensors(args)]
    try:
        got = module.backwards[label](grad_out, *inputs, out=expected, grads=grads)
    except Exception as e:  # the backward's own argument check, or a launch failure
        return f"backward raised {_oneline(e)}"
    if len(got) != len(grads) or any(g is not w for g, w in zip(got, grads)):
        return "backward returned new tensors instead of writing into `grads`"
    names = ["grad_out", *(passes.grad_names(op, range(len(inputs)))), "out"]
    for name, original, now in zip([n for n, a in zip(names, args) if isinstance(a, torch.Tensor)], before,
                                   _tensors(args)):
        if not torch.equal(original, now):
            return f"backward modified its argument {name}"
    atol, rtol = op.backward.tolerances[dtype] if op.backward else op.tolerances[dtype]
    for name, g, w in zip(passes.grad_names(op, indices), grads, wanted):
        failure = first_mismatch(g, w, atol=atol, rtol=rtol)
        if failure:
            return f"gradient of {name}: {failure}"
    return None


def match_reference(op: OpSpec, module: OpModule, label: str, shape: dict, dtype: str, seed: int) -> str | None:
    """None if candidate `label` matches the reference at this shape, dtype and seed, else why not."""
    import torch

    inputs, before, expected, out = _reference_side(op, module, shape, dtype, seed)
    try:
        got = module.candidates[label](*inputs, out=out)
    except Exception as e:  # the op's own argument check, or a launch failure
        return f"raised {_oneline(e)}"
    if got is not out:
        return "returned a new tensor instead of writing into `out`"
    for i, (original, now) in enumerate(zip(before, _tensors(inputs))):
        if not torch.equal(original, now):
            return f"modified its input {i}"
    atol, rtol = op.tolerances[dtype]
    try:
        torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
    except AssertionError as e:
        return first_mismatch(out, expected, atol=atol, rtol=rtol) or str(e)
    return None


def warm_up(op: OpSpec, module: OpModule, shape: dict, dtype: str, seed: int) -> None:
    """`match_reference`'s work without a candidate: what a process runs once so that the real check
    starts warm (the GPU code of input making, the reference and the comparison loaded)."""
    import torch

    inputs, before, expected, out = _reference_side(op, module, shape, dtype, seed)
    out.copy_(expected)
    all(torch.equal(a, b) for a, b in zip(before, _tensors(inputs)))
    atol, rtol = op.tolerances[dtype]
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)


def _reference_side(op: OpSpec, module: OpModule, shape: dict, dtype: str, seed: int) -> tuple:
    """The inputs, copies of them (to check they stay unchanged), the reference output, and an output
    pre-filled with NaN for the candidate to write into."""
    import torch

    inputs = module.make_inputs(shape, dtype, device(op), seed)
    before = [t.clone() for t in _tensors(inputs)]
    expected = module.reference(*inputs)
    return inputs, before, expected, torch.full_like(expected, float("nan"))


def first_mismatch(got: Tensor, expected: Tensor, *, atol: float, rtol: float) -> str | None:
    """How `got` differs from `expected`: how many elements, the first one (row-major) with both values,
    and the greatest absolute difference; None when every element is within tolerance."""
    import torch

    if got.shape != expected.shape:
        return f"output has shape {tuple(got.shape)}, the reference {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return f"output has dtype {got.dtype}, the reference {expected.dtype}"
    a, b = got.detach().double().cpu(), expected.detach().double().cpu()
    bad = ~torch.isclose(a, b, atol=atol, rtol=rtol)
    count = int(bad.sum())
    if count == 0:
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    where = list(first) if first else "[]"
    x, y = float(a[first]), float(b[first])
    unwritten = " (still NaN: never written?)" if x != x and y == y else ""
    diff = (a - b).abs().nan_to_num(nan=float("inf"))
    worst = _unravel(int(diff.argmax()), tuple(diff.shape))
    return (f"{count} of {a.numel()} elements differ (atol {atol:g}, rtol {rtol:g}); first at {where}: "
            f"got {x:.6g}{unwritten}, expected {y:.6g}; greatest |difference| {float(diff[worst]):.3g} "
            f"at {list(worst) if worst else '[]'}")


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element `flat` of a row-major tensor of `shape`."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def example(op: OpSpec, module: OpModule) -> tuple:
    """Valid inputs at the first test shape whose first input can be made non-contiguous."""
    for shape in op.test_shapes:
        inputs = module.make_inputs(shape, op.dtypes[0], device(op), seed=0)
        if not strided(inputs[0]).is_contiguous():
            return inputs
    raise ConfigError(f"{op.name}: no test shape lets its first input be non-contiguous; add one with last dim > 1.")


def strided(t: Tensor) -> Tensor:
    """The same values as `t`, in a tensor that skips every other element of its last dim."""
    import torch

    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _wrong_dtype(op: OpSpec) -> Any:
    import torch

    return next(getattr(torch, d) for d in ("float64", "float32", "float16", "bfloat16") if d not in op.dtypes)


#: Mistakes in the first input that every op must reject: name -> (spoil(op, tensor), pattern its message matches).
BAD_INPUTS: dict[str, tuple[Callable[[OpSpec, Any], Any], str]] = {
    "dtype": (lambda op, t: t.to(_wrong_dtype(op)), "dtype"),
    # A CUDA op gets a CPU tensor; a CPU op gets a meta tensor, so no GPU is needed to check it.
    "device": (lambda op, t: t.to("cpu" if op.needs_gpu else "meta"), "device"),
    "contiguous": (lambda op, t: strided(t), "contiguous"),
}


def rejects_bad_input(op: OpSpec, module: OpModule, label: str, mistake: str) -> str | None:
    """None if candidate `label` rejects a first input with `mistake` (a BAD_INPUTS key), else why not."""
    inputs = example(op, module)
    spoil, pattern = BAD_INPUTS[mistake]
    bad = (spoil(op, inputs[0]), *inputs[1:])
    return _raises(lambda: module.candidates[label](*bad), (RuntimeError, TypeError, ValueError), pattern,
                   f"a first input with the wrong {mistake}" if mistake != "contiguous" else "a non-contiguous first input")


def rejects_bad_shapes(op: OpSpec, module: OpModule, label: str) -> str | None:
    """None if candidate `label` rejects a wrong-shaped `out` and every case of the op's shape_errors."""
    import torch

    inputs = example(op, module)
    expected = module.reference(*inputs)
    wrong_out = torch.empty(*expected.shape[:-1], expected.shape[-1] + 1, dtype=expected.dtype, device=expected.device)
    cases = [(inputs, wrong_out, "out", "a wrong-shaped out")] + [
        (bad, None, pattern, f"shape_errors case {i}") for i, (bad, pattern) in enumerate(module.shape_errors(*inputs))
    ]
    for bad, out, pattern, what in cases:
        call = functools.partial(module.candidates[label], *bad, out=out)
        failure = _raises(call, (RuntimeError, ValueError), pattern, what)
        if failure:
            return failure
    return None


def _raises(call: Callable[[], Any], types: tuple[type[BaseException], ...], pattern: str, what: str) -> str | None:
    """None if call() raises one of `types` whose message matches `pattern` (as pytest.raises(match=))."""
    try:
        call()
    except types as e:
        if re.search(pattern, str(e)):
            return None
        return f"{what}: raised {type(e).__name__}, but its message does not match {pattern!r}: {_oneline(e)}"
    except Exception as e:
        return f"{what}: raised {_oneline(e)}, not one of {', '.join(t.__name__ for t in types)}"
    return f"{what} was accepted; expected an error matching {pattern!r}"


def _tensors(values: Any) -> list:
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]


def _oneline(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
