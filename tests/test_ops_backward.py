"""An op's backward: op.toml's [backward] (kernellab.ops.backward), and the gradient check the kernel tests run
(kernellab.ops.checks.match_gradients) on a toy op whose candidates are Python, so no compiler is needed."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from kernellab.errors import ConfigError
from kernellab.ops import library, tolerances

#: y = x * weight (rows, cols) * (cols,): dx = dy * weight, dweight = sum over rows of dy * x.
TOY = """
description = "scale each row by a weight"
kind = "cpu"
dtypes = ["float32", "float64"]
bytes = "(2 * rows * cols + cols) * itemsize"
flops = "rows * cols"
test_shapes = [{ rows = 3, cols = 7 }, { rows = 5, cols = 33 }]
bench_shapes = [{ rows = 64, cols = 128 }]
candidates = { kernellab = "toy", plain = "toy_plain" }
"""
BACKWARD = """
[backward]
bytes = "(3 * rows * cols + 2 * cols) * itemsize"
flops = "3 * rows * cols"
"""
#: `plain` has no backward: its backward and full rows say so.
KERNELLAB_ONLY = BACKWARD + 'candidates = { kernellab = "toy_backward" }\n'
REFERENCE = '''import torch


def make_inputs(shape, dtype, device, gen):
    x = torch.randn(shape["rows"], shape["cols"], dtype=dtype, device=device, generator=gen)
    weight = 1 + 0.5 * torch.randn(shape["cols"], dtype=dtype, device=device, generator=gen)
    return x, weight


def reference(x, weight):
    return x * weight
'''


def toy_spec(root: Path, extra: str = KERNELLAB_ONLY) -> library.OpSpec:
    folder = root / "toy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "op.toml").write_text(TOY + extra)
    (folder / "reference.py").write_text(REFERENCE)
    (folder / "toy.cpp").write_text("// source\n")
    return library.parse_spec(folder / "op.toml")


def forward(x: Any, weight: Any, out: Any = None) -> Any:
    out = x.new_empty(x.shape) if out is None else out
    return out.copy_(x * weight)


def backward(grad_out: Any, x: Any, weight: Any, out: Any, grad_x: Any, grad_weight: Any) -> None:
    """The registered form: NAME_backward(grad_out, *inputs, out, *grads), writing the grads."""
    grad_x.copy_(grad_out * weight)
    grad_weight.copy_((grad_out * x).sum(0))


def toy_module(spec: library.OpSpec, back: Callable[..., None] = backward) -> library.OpModule:
    reference = library.import_file(spec, "reference.py")
    wrapped = library._writing_grads(back, "kernellab", spec)
    return library.OpModule(spec, reference, {"kernellab": forward, "plain": forward}, None,
                            backwards={"kernellab": wrapped})


# --- op.toml ---------------------------------------------------------------------------------


def test_a_backward_table_fills_in_its_defaults(tmp_path: Path) -> None:
    spec = toy_spec(tmp_path, BACKWARD)
    back = spec.backward
    assert back is not None
    assert back.candidates == {"kernellab": "toy_backward", "plain": "toy_plain_backward"}
    assert back.grads == ()  # every floating-point tensor input
    assert back.params == ("x", "weight")
    assert back.tolerances == spec.tolerances  # the forward's, where it declares none of its own
    assert spec.passes == ("forward", "backward", "full")


def test_passes_have_their_own_bytes_and_the_full_pass_adds_them(tmp_path: Path) -> None:
    spec = toy_spec(tmp_path)
    shape = {"rows": 64, "cols": 128}
    forward_bytes, backward_bytes = (2 * 64 * 128 + 128) * 4, (3 * 64 * 128 + 2 * 128) * 4
    assert spec.bytes_moved(shape, "float32") == forward_bytes
    assert spec.bytes_moved(shape, "float32", "backward") == backward_bytes
    assert spec.bytes_moved(shape, "float32", "full") == forward_bytes + backward_bytes
    assert spec.flops(shape, "float32", "full") == 4 * 64 * 128


def test_a_forward_only_op_has_one_pass_and_no_backward_bytes(tmp_path: Path) -> None:
    spec = toy_spec(tmp_path, extra="")
    assert spec.backward is None and spec.passes == ("forward",)
    with pytest.raises(ConfigError, match="toy has no backward pass"):
        spec.bytes_moved({"rows": 1, "cols": 1}, "float32", "backward")


def test_grads_candidates_and_tolerances_can_be_declared(tmp_path: Path) -> None:
    spec = toy_spec(tmp_path, BACKWARD + 'grads = ["weight", "x"]\ncandidates = { kernellab = "toy_bwd" }\n'
                                         "[backward.tolerances]\nfloat32 = [1e-3, 2e-3]\n")
    assert spec.backward is not None
    assert spec.backward.grads == ("x", "weight")  # in reference()'s argument order
    assert spec.backward.candidates == {"kernellab": "toy_bwd"}
    assert spec.backward.tolerances == {"float32": (1e-3, 2e-3), "float64": tolerances.DEFAULTS["float64"]}


@pytest.mark.parametrize("extra, message", [
    ("[backward]\nflops = '1'\n", "backward.bytes is required"),
    (BACKWARD + "grad = ['x']\n", "unknown key.*backward.grad"),
    (BACKWARD + "grads = ['bias']\n", "'bias', which is not an argument of reference\\(\\) \\(x, weight\\)"),
    (BACKWARD + "candidates = { fast = 'toy_backward' }\n", "'fast', which is not a candidate"),
    (BACKWARD + "[backward.tolerances]\nfloat16 = [1e-3, 1e-3]\n", "backward.tolerances.float16"),
    ('backward = true\n', "backward must be a table"),
    ("[backward]\nbytes = 'rows * nope'\nflops = '1'\n", "backward.bytes = 'rows \\* nope' fails"),
])
def test_mistakes_in_the_backward_table_name_the_key(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        toy_spec(tmp_path, extra)
    assert "op.toml" in str(e.value)


def test_the_shipped_cpu_op_declares_a_backward() -> None:
    (spec,) = library.discover(select="rmsnorm_cpu")
    assert spec.backward is not None and spec.backward.candidates == {"kernellab": "rmsnorm_cpu_backward"}


# --- the gradient check (needs torch, no compiler) ----------------------------------------------

torch = pytest.importorskip("torch")
from kernellab.ops import checks, passes  # noqa: E402


def test_a_right_backward_passes_every_case(tmp_path: Path) -> None:
    spec = toy_spec(tmp_path)
    module = toy_module(spec)
    cases = list(checks.gradient_cases(spec))
    assert {c[0] for c in cases} == {"kernellab"}  # only the candidates [backward] names
    for label, shape, dtype, seed in cases:
        assert checks.match_gradients(spec, module, label, shape, dtype, seed) is None


def test_a_wrong_gradient_names_the_input_and_its_worst_element(tmp_path: Path) -> None:
    def off_at_3(grad_out: Any, x: Any, weight: Any, out: Any, grad_x: Any, grad_weight: Any) -> None:
        backward(grad_out, x, weight, out, grad_x, grad_weight)
        grad_weight[3] += 0.5

    spec = toy_spec(tmp_path)
    failure = checks.match_gradients(spec, toy_module(spec, off_at_3), "kernellab", {"rows": 3, "cols": 7},
                                     "float32", 0)
    assert failure is not None
    assert failure.startswith("gradient of weight: 1 of 7 elements differ")
    assert "first at [3]" in failure and "greatest |difference| 0.5 at [3]" in failure


def test_an_unwritten_gradient_and_a_modified_argument_are_caught(tmp_path: Path) -> None:
    def skips_last_row(grad_out: Any, x: Any, weight: Any, out: Any, grad_x: Any, grad_weight: Any) -> None:
        grad_x[:-1].copy_(grad_out[:-1] * weight)
        grad_weight.copy_((grad_out * x).sum(0))

    def scales_grad_out(grad_out: Any, x: Any, weight: Any, out: Any, grad_x: Any, grad_weight: Any) -> None:
        backward(grad_out, x, weight, out, grad_x, grad_weight)
        grad_out.mul_(2)

    spec = toy_spec(tmp_path)
    shape = {"rows": 3, "cols": 7}
    unwritten = checks.match_gradients(spec, toy_module(spec, skips_last_row), "kernellab", shape, "float64", 0)
    assert unwritten is not None and unwritten.startswith("gradient of x: 7 of 21") and "never written?" in unwritten
    modified = checks.match_gradients(spec, toy_module(spec, scales_grad_out), "kernellab", shape, "float64", 0)
    assert modified == "backward modified its argument grad_out"


def test_the_autograd_wrapper_gives_the_reference_gradients(tmp_path: Path) -> None:
    spec = toy_spec(tmp_path)
    module = toy_module(spec)
    inputs = module.make_inputs({"rows": 4, "cols": 5}, "float64", "cpu", 0)
    grad_out = module.make_grad_out(module.reference(*inputs), 0)
    out, grads = passes.run_full(module.differentiable("kernellab", inputs), inputs, grad_out, [0, 1])
    torch.testing.assert_close(out.detach(), module.reference(*inputs))
    for got, want in zip(grads, module.reference_grads(inputs, grad_out)):
        torch.testing.assert_close(got, want)
    with pytest.raises(passes.NoBackward, match="no backward"):
        passes.prepare(lambda x, w: (x * w).detach(), inputs, "backward", grad_out, [0, 1])


def test_profile_and_sanitize_launch_the_pass_the_bench_times(tmp_path: Path) -> None:
    """kernellab.ops.passes.for_impl: what `profile --pass` and the sanitizer's child call, per implementation."""
    spec = toy_spec(tmp_path)
    module = toy_module(spec)
    module.baselines["eager"] = module._ref.reference
    inputs = module.make_inputs({"rows": 4, "cols": 5}, "float64", "cpu", 0)
    call, setup = passes.for_impl(module, "kernellab", module.candidates["kernellab"], inputs, "forward")
    assert setup is None and torch.equal(call(), module.reference(*inputs))
    for name in ("kernellab", "eager"):
        call, setup = passes.for_impl(module, name, module.candidates.get(name) or module.baselines[name], inputs,
                                      "backward")
        assert setup is not None
        setup()
        grads = call()
        want = module.reference_grads(inputs, module.make_grad_out(module.reference(*inputs), 0))
        for got, expected in zip(grads, want):
            torch.testing.assert_close(got, expected)
    with pytest.raises(ConfigError, match="candidate plain has no backward"):
        passes.for_impl(module, "plain", module.candidates["plain"], inputs, "full")


def test_profile_refuses_a_pass_the_op_does_not_have(tmp_path: Path) -> None:
    from kernellab.nsight import profile

    spec = toy_spec(tmp_path, extra="")
    toml = spec.path / "op.toml"
    toml.write_text(toml.read_text().replace('kind = "cpu"', 'kind = "cuda"'))
    with pytest.raises(ConfigError, match="--pass backward: toy's passes are forward .its op.toml declares no"):
        profile.run(tmp_path, "toy", which="backward")
