"""Every op under kernels/ against its reference: all test shapes, dtypes and seeds, and its argument checks.

Ops are discovered, not listed. Ops that need a GPU skip with the reason when none is visible; the
CPU op runs everywhere. Set KERNELLAB_OPS to a -k style expression to test some ops only. The checks
themselves are kernellab.ops.checks, which `invoke watch` reruns on every save.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch, or use a kernellab image)")

from kernellab.ops import checks, library  # noqa: E402

OPS = library.discover(select=os.environ.get("KERNELLAB_OPS"))


def _shape_id(shape: dict) -> str:
    return ",".join(f"{k}{v}" for k, v in shape.items())


def _marks(op: library.OpSpec) -> list:
    return [pytest.mark.gpu] if op.needs_gpu else []


def _cases():
    for op in OPS:
        for label, shape, dtype, seed in checks.cases(op):
            yield pytest.param(op, label, shape, dtype, seed, marks=_marks(op),
                               id=f"{op.name}-{label}-{_shape_id(shape)}-{dtype}-seed{seed}")


def _gradient_cases():
    for op in OPS:
        for label, shape, dtype, seed in checks.gradient_cases(op):
            yield pytest.param(op, label, shape, dtype, seed, marks=_marks(op),
                               id=f"{op.name}-{label}-backward-{_shape_id(shape)}-{dtype}-seed{seed}")


def _per_candidate():
    for op in OPS:
        for label in op.candidates:
            yield pytest.param(op, label, marks=_marks(op), id=f"{op.name}-{label}")


def _loaded(op: library.OpSpec, label: str | None = None) -> library.OpModule:
    reason = library.unavailable(op)
    if reason:
        pytest.skip(reason)
    module = library.load(op)
    if label in module.unavailable:  # op.toml's `requires`: arch-specific code this build or GPU lacks
        pytest.skip(module.unavailable[label])
    return module


@pytest.mark.parametrize("op, label, shape, dtype, seed", list(_cases()))
def test_matches_reference(op: library.OpSpec, label: str, shape: dict, dtype: str, seed: int) -> None:
    failure = checks.match_reference(op, _loaded(op, label), label, shape, dtype, seed)
    assert failure is None, f"{op.name}/{label}: {failure}"


@pytest.mark.parametrize("op, label, shape, dtype, seed", list(_gradient_cases()))
def test_gradients_match_autograd(op: library.OpSpec, label: str, shape: dict, dtype: str, seed: int) -> None:
    """An op with a [backward]: every input's gradient against autograd on the reference (float64)."""
    failure = checks.match_gradients(op, _loaded(op, label), label, shape, dtype, seed)
    assert failure is None, f"{op.name}/{label} backward: {failure}"


@pytest.mark.parametrize("mistake", list(checks.BAD_INPUTS))
@pytest.mark.parametrize("op, label", list(_per_candidate()))
def test_rejects_bad_first_input(op: library.OpSpec, label: str, mistake: str) -> None:
    failure = checks.rejects_bad_input(op, _loaded(op, label), label, mistake)
    assert failure is None, f"{op.name}/{label}: {failure}"


@pytest.mark.parametrize("op, label", list(_per_candidate()))
def test_rejects_bad_shapes(op: library.OpSpec, label: str) -> None:
    failure = checks.rejects_bad_shapes(op, _loaded(op, label), label)
    assert failure is None, f"{op.name}/{label}: {failure}"


@pytest.mark.parametrize("op", [pytest.param(op, marks=_marks(op), id=op.name) for op in OPS if op.requires])
def test_arch_specific_code_is_in_the_library(op: library.OpSpec) -> None:
    """A library whose candidates require sm_90a (op.toml's `requires`) holds that code wherever the build
    could make it; a build that silently dropped the `a` would run the wrong code or none."""
    from kernellab.ops import binaries

    module = _loaded(op)
    variants, _ = library.arch_requirements(op, gpu=False)
    assert module.build is not None
    cubins = binaries.fingerprint(module.build.device_code).cubins
    if not cubins:
        pytest.skip("no cuobjdump here to list the library's code")
    for variant in variants:
        assert "sm_" + variant.replace(".", "") in cubins, f"{op.name}: {cubins}"


def test_every_op_is_tested() -> None:
    assert OPS or os.environ.get("KERNELLAB_OPS"), "no ops discovered under kernels/"
    assert any(not op.needs_gpu for op in library.discover()), "an op without a GPU keeps this suite meaningful on CPU CI"


SOFTMAX = [op for op in OPS if op.name == "softmax"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows, cols", [(4, 8192), (64, 4096), (3, 7), (16, 40), (4, 20000), (8, 40000), (1000, 1026)])
@pytest.mark.parametrize("op", SOFTMAX, ids=[op.name for op in SOFTMAX])
def test_softmax_of_masked_rows(op: library.OpSpec, rows: int, cols: int, dtype: str) -> None:
    """Attention scores under a mask: PyTorch's softmax, NaN where it has NaN, eight kinds of rows in turn (4-row
    shapes take the first four; 8x40000 is streamed, as is float32 4x20000; 16x40 puts several rows in a warp, far
    ones beside near ones). float16 holds no value that far: kinds 4 and 5 overflow to -inf and +inf there.
    - A row near -1000 with 90% of it masked at random (its first element kept) leaves threads holding only -inf beside
      the row's max: rescaling a thread's kept exponentials to it must give them 0, not NaN.
    - Rows masked whole by the lowest finite value (Hugging Face's masks), or of values near 3e9 (256 apart), are far
      beyond 2^30 / log2(e), where max * log2(e) is off by more than exp2 can hold, or overflows: uniform over the
      values equal to the max, 0 elsewhere.
    - A row near -5e8 (below that) with threads holding only -1e10 (beyond it): they add their 0 to its sum.
    - A row holding +inf, and one of the lowest finite value holding a NaN: NaN throughout, as for PyTorch.
    - A NaN among -infs (the second row's first element): NaN throughout too, as for PyTorch."""
    module = _loaded(op)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = 3 * torch.randn(rows, cols, device="cuda", generator=gen)
    x[0::8, max(1, cols // 2):] = float("-inf")  # a causal mask's rows
    x[1::8] = float("-inf")  # a row masked whole
    x[9::16, 0] = float("nan")  # ... every second one holding a NaN as well
    low = x[2::8] - 1000  # far below 0, mostly masked
    x[2::8] = low.masked_fill(torch.rand(low.shape, device="cuda", generator=gen) < 0.9, float("-inf"))
    x[2::8, 0] = -1000.0
    x[4::8] = -1e10  # threads far below the row's max, -5e8 (its first quarter)
    x[4::8, : cols // 4 + 1] = -5e8
    x[5::8] = 3e9 + 256 * torch.randint(0, 3, x[5::8].shape, device="cuda", generator=gen)
    x[6::8, min(1, cols - 1)] = float("inf")  # a row holding +inf: NaN throughout
    x = x.to(getattr(torch, dtype))
    x[3::8] = torch.finfo(x.dtype).min  # masked whole by the lowest finite value: 1 / cols
    x[7::8] = torch.finfo(x.dtype).min  # ... and holding a NaN: NaN throughout
    x[7::8, min(2, cols - 1)] = float("nan")
    expected = torch.softmax(x.float(), dim=-1).to(x.dtype)
    atol, rtol = op.tolerances[dtype]
    for label, fn in module.candidates.items():
        got = fn(x)
        assert torch.equal(got.isnan(), expected.isnan()), f"{label}: NaN where PyTorch has none, or none where it has"
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, equal_nan=True)


def _forward_then_backward_cases():
    for op in OPS:
        if op.backward:  # the CPU op too: the same sequence, no early launch, on any machine
            shapes = [(4, 8192), (2048, 4096), (1000, 1026)] if op.needs_gpu else [(4, 8192), (1000, 1026)]
            for rows, cols in shapes:
                for dtype in op.bench_dtypes:
                    yield pytest.param(op, rows, cols, dtype, marks=_marks(op), id=f"{op.name}-rows{rows},cols{cols}-{dtype}")


@pytest.mark.parametrize("op, rows, cols, dtype", list(_forward_then_backward_cases()))
def test_a_backward_launched_right_after_a_forward_reads_what_that_forward_wrote(
        op: library.OpSpec, rows: int, cols: int, dtype: str) -> None:
    """A training step launches a backward as soon as autograd reaches it, and the row ops' backwards may start
    before the kernel ahead of them ends (a programmatic dependent launch: kl::launch_dependent), so they must wait
    there before reading anything. Each turn launches, with no synchronisation between and the buffers filled with
    NaN first: the forward into `out` and at once the backward reading it (softmax's gradient is a function of its
    output); then the forward into grad_out and at once the backward reading that (the norms' backwards read x and
    grad_out; the forward's output stands for what the kernel before a backward writes in training). Two inputs in
    turn, ten times (a workspace left by the turn before holds the other input's sums): every time the gradients must
    be the reference's, at a handful of rows (the backward starting on idle SMs), many waves of blocks, and unaligned
    rows."""
    module = _loaded(op)
    labels = [label for label in op.backward.candidates if label in module.backwards]
    assert labels, f"{op.name}: none of its backward candidates {list(op.backward.candidates)} was loaded"
    label, device = labels[0], "cuda" if op.needs_gpu else "cpu"
    forward, backward = module.candidates[label], module.backwards[label]
    shape = {"rows": rows, "cols": cols}
    cases = []
    for seed in (0, 1):
        inputs = module.make_inputs(shape, dtype, device, seed)
        y = forward(*inputs)
        given = module.make_grad_out(y, seed)
        cases.append((inputs, y, given, module.reference_grads(inputs, given), module.reference_grads(inputs, y)))
    atol, rtol = op.backward.tolerances[dtype]

    def check(grads: list, wanted: list, what: str) -> None:
        if op.needs_gpu:
            torch.cuda.synchronize()
        for i, (got, want) in enumerate(zip(grads, wanted)):
            failure = checks.first_mismatch(got, want, atol=atol, rtol=rtol)
            assert failure is None, f"{label}, {what}, gradient {i}: {failure}"

    for turn in range(10):
        inputs, y, given, wanted_given, wanted_y = cases[turn % 2]
        out = torch.full_like(y, float("nan"))
        grads = [torch.full_like(w, float("nan")) for w in wanted_given]
        forward(*inputs, out=out)
        backward(given, *inputs, out=out, grads=grads)
        check(grads, wanted_given, f"turn {turn}, right after the forward wrote out")
        grad_out = torch.full_like(y, float("nan"))
        grads = [torch.full_like(w, float("nan")) for w in wanted_y]
        forward(*inputs, out=grad_out)
        backward(grad_out, *inputs, out=out, grads=grads)
        check(grads, wanted_y, f"turn {turn}, right after a forward wrote grad_out")


NORMS = [op for op in OPS if op.name in ("layernorm", "rmsnorm")]

# One process, its runtime caches cold: threads launch the backward at once, each at every shape in its own order.
FIRST_LAUNCHES = r"""
import sys, threading, traceback
from pathlib import Path
import torch
from kernellab.ops import checks, library, spec as opspec
op = opspec.parse_spec(Path(sys.argv[1]))
module = library.load(op)
label = next(name for name in op.backward.candidates if name in module.backwards)
backward = module.backwards[label]
atol, rtol = op.backward.tolerances[sys.argv[2]]
cases = []
for rows, cols in ((150, 10000), (600, 4096), (4, 8192), (2048, 2048), (20001, 40), (2, 70000)):
    inputs = module.make_inputs({"rows": rows, "cols": cols}, sys.argv[2], "cuda", 0)
    out = module.candidates[label](*inputs)
    grad_out = module.make_grad_out(out, 0)
    cases.append((f"{rows}x{cols}", inputs, out, grad_out, module.reference_grads(inputs, grad_out)))
torch.cuda.synchronize()
start, failures = threading.Barrier(4, timeout=120), []

def run(order):
    try:  # an exception (a launch that failed) is a failure, not a thread that quietly ends
        stream = torch.cuda.Stream()
        start.wait()
        with torch.cuda.stream(stream):
            for name, inputs, out, grad_out, wanted in (cases[i] for i in order):
                grads = [torch.full_like(w, float("nan")) for w in wanted]
                backward(grad_out, *inputs, out=out, grads=grads)
                stream.synchronize()
                for i, (got, want) in enumerate(zip(grads, wanted)):
                    failure = checks.first_mismatch(got, want, atol=atol, rtol=rtol)
                    if failure:
                        failures.append(f"{name}, gradient {i}: {failure}")
    except BaseException:
        failures.append(traceback.format_exc())
        start.abort()

orders = [range(len(cases)), reversed(range(len(cases))), [1, 0, 3, 2, 5, 4], [4, 5, 0, 1, 2, 3]]
threads = [threading.Thread(target=run, args=(list(order),)) for order in orders]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\n".join(failures) or "ok")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", NORMS, ids=[op.name for op in NORMS])
def test_norm_backwards_first_launched_from_threads_at_once(op: library.OpSpec, dtype: str) -> None:
    """A norm backward asks the CUDA runtime once per kernel and device how many blocks fit and lets the kernel have
    the device's shared memory (kl::prepare_kernel, kl::blocks_per_sm), so the first calls set what later ones read.
    Four threads of a fresh process launch it at once on streams of their own, each at six shapes of different plans
    (bfloat16: rows staged through 128 KB or 32 KB of shared memory; float32: rows in registers; several rows a block;
    a handful of rows; streamed) in its own order, into gradients filled with NaN: every gradient must be the
    reference's, and a launch that fails (a kernel not allowed its shared memory) fails the test."""
    _loaded(op)  # built, and skipped where it cannot run
    import subprocess
    import sys

    from kernellab import ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", FIRST_LAUNCHES, str(op.path / "op.toml"), dtype],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "ok", result.stdout[-3000:]
