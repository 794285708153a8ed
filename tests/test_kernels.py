"""Every op under kernels/ against its reference: all test shapes, dtypes and seeds, and its argument checks.

Ops are discovered, not listed. Ops that need a GPU skip with the reason when none is visible; the
CPU op runs everywhere. Set KERNELLAB_OPS to a -k style expression to test some ops only.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch, or use a kernellab image)")

from kernellab import ops  # noqa: E402

OPS = ops.discover(select=os.environ.get("KERNELLAB_OPS"))


def _shape_id(shape: dict) -> str:
    return ",".join(f"{k}{v}" for k, v in shape.items())


def _marks(op: ops.OpSpec) -> list:
    return [pytest.mark.gpu] if op.needs_gpu else []


def _cases():
    for op in OPS:
        for label in op.candidates:
            for shape in op.test_shapes:
                for dtype in op.dtypes:
                    for seed in op.seeds:
                        yield pytest.param(op, label, shape, dtype, seed, marks=_marks(op),
                                           id=f"{op.name}-{label}-{_shape_id(shape)}-{dtype}-seed{seed}")


def _per_candidate():
    for op in OPS:
        for label in op.candidates:
            yield pytest.param(op, label, marks=_marks(op), id=f"{op.name}-{label}")


def _loaded(op: ops.OpSpec) -> ops.OpModule:
    reason = ops.unavailable(op)
    if reason:
        pytest.skip(reason)
    return ops.load(op)


def _device(op: ops.OpSpec) -> str:
    return "cuda" if op.needs_gpu else "cpu"


def _tensors(values) -> list:
    return [v for v in values if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("op, label, shape, dtype, seed", list(_cases()))
def test_matches_reference(op: ops.OpSpec, label: str, shape: dict, dtype: str, seed: int) -> None:
    module = _loaded(op)
    inputs = module.make_inputs(shape, dtype, _device(op), seed)
    before = [t.clone() for t in _tensors(inputs)]
    expected = module.reference(*inputs)
    # NaN everywhere first: an element the kernel forgets to write cannot pass by luck.
    out = torch.full_like(expected, float("nan"))

    got = module.candidates[label](*inputs, out=out)

    assert got is out
    for original, now in zip(before, _tensors(inputs)):
        assert torch.equal(original, now), f"{op.name}/{label} modified one of its inputs"
    atol, rtol = op.tolerances[dtype]
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)


def _example(op: ops.OpSpec, module: ops.OpModule) -> tuple:
    """Valid inputs at the first test shape whose first input can be made non-contiguous."""
    for shape in op.test_shapes:
        inputs = module.make_inputs(shape, op.dtypes[0], _device(op), seed=0)
        if not _strided(inputs[0]).is_contiguous():
            return inputs
    raise AssertionError(f"{op.name}: no test shape lets its first input be non-contiguous; add one with last dim > 1")


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values as `t`, in a tensor that skips every other element of its last dim."""
    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _wrong_dtype(op: ops.OpSpec) -> torch.dtype:
    return next(getattr(torch, d) for d in ("float64", "float32", "float16", "bfloat16") if d not in op.dtypes)


BAD_INPUTS = {
    "dtype": (lambda op, t: t.to(_wrong_dtype(op)), "dtype"),
    # A CUDA op gets a CPU tensor; a CPU op gets a meta tensor, so no GPU is needed to test it.
    "device": (lambda op, t: t.to("cpu" if op.needs_gpu else "meta"), "device"),
    "contiguous": (lambda op, t: _strided(t), "contiguous"),
}


@pytest.mark.parametrize("mistake", list(BAD_INPUTS))
@pytest.mark.parametrize("op, label", list(_per_candidate()))
def test_rejects_bad_first_input(op: ops.OpSpec, label: str, mistake: str) -> None:
    module = _loaded(op)
    inputs = _example(op, module)
    spoil, pattern = BAD_INPUTS[mistake]
    bad = (spoil(op, inputs[0]), *inputs[1:])
    with pytest.raises((RuntimeError, TypeError, ValueError), match=pattern):
        module.candidates[label](*bad)


@pytest.mark.parametrize("op, label", list(_per_candidate()))
def test_rejects_bad_shapes(op: ops.OpSpec, label: str) -> None:
    module = _loaded(op)
    inputs = _example(op, module)
    expected = module.reference(*inputs)
    wrong_out = torch.empty(*expected.shape[:-1], expected.shape[-1] + 1, dtype=expected.dtype, device=expected.device)
    cases = [(inputs, wrong_out, "out")] + [(bad, None, pattern) for bad, pattern in module.shape_errors(*inputs)]
    for bad, out, pattern in cases:
        with pytest.raises((RuntimeError, ValueError), match=pattern):
            module.candidates[label](*bad, out=out)


def test_every_op_is_tested() -> None:
    assert OPS or os.environ.get("KERNELLAB_OPS"), "no ops discovered under kernels/"
    assert any(not op.needs_gpu for op in ops.discover()), "an op without a GPU keeps this suite meaningful on CPU CI"
