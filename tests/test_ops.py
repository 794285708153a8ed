"""op.toml parsing, op discovery and selection, tolerances, and the build report: pure logic, no compiler."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernellab.bench import gate, runner, timing
from kernellab.errors import ConfigError
from kernellab.ops import compilerlog, extensions, library, tolerances

MINIMAL = """
description = "test op"
kind = "cpu"
dtypes = ["float32", "float16"]
bytes = "2 * n * itemsize"
flops = "n"
test_shapes = [{ n = 1 }, { n = 5 }]
bench_shapes = [{ n = 1024 }]
"""


def make_op(root: Path, name: str = "toy", toml: str = MINIMAL, files: tuple[str, ...] = ("toy.cpp",)) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "op.toml").write_text(toml)
    (folder / "reference.py").write_text("def reference(x):\n    return x\n")
    for f in files:
        (folder / f).write_text("// source\n")
    return folder


def test_every_shipped_op_parses_and_its_formulas_evaluate() -> None:
    specs = library.discover()
    assert {"vector_add", "softmax", "layernorm", "matmul", "attention", "softmax_triton", "rmsnorm_cpu"} <= {
        s.name for s in specs}
    for spec in specs:
        shape, dtype = spec.bench_shapes[0], spec.bench_dtypes[0]
        assert spec.bytes_moved(shape, dtype) > 0
        assert spec.flops(shape, dtype) > 0
        assert "eager" in spec.baselines
        assert set(spec.tolerances) == set(spec.dtypes)
        assert spec.needs_gpu == (spec.kind != "cpu")


def test_defaults_fill_in(tmp_path: Path) -> None:
    make_op(tmp_path)
    (spec,) = library.discover(tmp_path)
    assert spec.sources == ["toy.cpp"]
    assert spec.candidates == {"kernellab": "toy"}
    assert spec.baselines == ["eager"]
    assert spec.bench_dtypes == ["float32", "float16"]
    assert spec.seeds == library.DEFAULT_SEEDS
    assert spec.tolerances == {"float32": (1e-4, 1e-4), "float16": (1e-3, 1e-3)}
    assert spec.bytes_moved({"n": 1024}, "float16") == 4096
    assert not spec.needs_gpu


def _kernels_with_a_shared_header(root: Path) -> library.OpSpec:
    """kernels/toy (toy.cu including its own toy.h and _common/row.cuh, which includes another shared header)."""
    folder = make_op(root, files=("toy.cu", "binding.cpp"))
    (folder / "toy.cu").write_text('#include "row.cuh"\n#include "toy.h"\n#include <cuda_runtime.h>\n__global__ void k() {}\n')
    (folder / "toy.h").write_text("#pragma once\n")
    (root / "_common").mkdir()
    (root / "_common" / "row.cuh").write_text('#include "base.cuh"\n')
    (root / "_common" / "base.cuh").write_text("// base\n")
    (spec,) = library.discover(root)
    return spec


def test_kernel_sources_name_every_file_an_op_compiles_by_content(tmp_path: Path) -> None:
    """A bench result records what each op compiled (results.json's `sources`): the same code in another checkout
    gives the same digest; an edit to a shared header changes it and shows in the file list."""
    spec = _kernels_with_a_shared_header(tmp_path / "a" / "kernels")
    first = library.kernel_sources(spec)
    assert sorted(first["files"]) == ["_common/base.cuh", "_common/row.cuh", "toy/binding.cpp", "toy/toy.cu",
                                      "toy/toy.h"]  # torch's and the system's headers are the environment's
    shutil.copytree(tmp_path / "a", tmp_path / "elsewhere")
    (copy,) = library.discover(tmp_path / "elsewhere" / "kernels")
    assert library.kernel_sources(copy) == first
    (tmp_path / "elsewhere" / "kernels" / "_common" / "base.cuh").write_text("// base, edited\n")
    edited = library.kernel_sources(copy)
    assert edited["sha256"] != first["sha256"]
    assert [f for f in first["files"] if first["files"][f] != edited["files"][f]] == ["_common/base.cuh"]


def test_kernel_sources_name_the_shared_headers_alike_wherever_they_are_found(tmp_path: Path) -> None:
    """An op in a kernels folder of its own, without `_common/`, builds against kernellab's: its files are named by
    the folder they lie in, as for a shipped op, never by this machine's paths."""
    folder = make_op(tmp_path / "mine", files=("toy.cu",))
    (folder / "toy.cu").write_text('#include "kernellab.h"\n')
    (spec,) = library.discover(tmp_path / "mine")
    files = library.kernel_sources(spec)["files"]
    assert sorted(files) == ["_common/kernellab.h", "toy/toy.cu"]
    assert files["_common/kernellab.h"] == library.kernel_sources(library.discover(select="vector_add")[0])[
        "files"]["_common/kernellab.h"]


def test_every_shipped_op_has_kernel_sources_under_the_kernels_folder() -> None:
    for spec in library.discover():
        files = library.kernel_sources(spec)["files"]
        assert files and all(not f.startswith("/") for f in files), (spec.name, files)
        assert all(f.startswith((f"{spec.name}/", "_common/")) for f in files), (spec.name, files)
        assert "unreadable" not in files.values()


def test_folders_without_op_toml_or_starting_with_underscore_are_not_ops(tmp_path: Path) -> None:
    make_op(tmp_path, "toy")
    make_op(tmp_path, "_common")
    (tmp_path / "notes").mkdir()
    assert [s.name for s in library.discover(tmp_path)] == ["toy"]


def _bench_tolerance(monkeypatch: pytest.MonkeyPatch, spec: Any, dtype: str) -> tuple[float, float]:
    """The (atol, rtol) the benchmark's correctness gate (runner.bench_case) checks `spec` with at `dtype`."""
    seen: list[tuple[float, float]] = []

    def check(fn: Any, inputs: tuple, expected: Any, *, atol: float, rtol: float) -> tuple[str, str]:
        seen.append((atol, rtol))
        return "wrong", "captured by the test"  # nothing gets timed

    monkeypatch.setattr(gate, "check", check)
    # An op with a [backward] also checks its gradients (tests/test_bench_passes.py); here the candidate has none.
    module = SimpleNamespace(candidates={"kernellab": lambda *a: None}, baselines={},
                             make_inputs=lambda *a: (), reference=lambda *a: None, make_grad_out=lambda *a: None,
                             grad_indices=lambda *a: [], reference_grads=lambda *a: [])
    ctx = runner.Context("cpu", timing.QUICK, True, None, None, None)  # no monitor or progress: nothing is timed
    runner.bench_case(spec, module, spec.bench_shapes[0], dtype, ctx)
    assert len(seen) == 1
    return seen[0]


def test_every_dtype_an_op_may_declare_has_a_default_tolerance() -> None:
    assert set(tolerances.DEFAULTS) == set(library.ITEMSIZE)


@pytest.mark.parametrize("dtype", sorted(tolerances.DEFAULTS))
def test_tests_and_bench_check_with_the_same_default_tolerance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               dtype: str) -> None:
    make_op(tmp_path, toml=MINIMAL.replace('["float32", "float16"]', f'["{dtype}"]'))
    (spec,) = library.discover(tmp_path)
    # tests/test_kernels.py checks with spec.tolerances[dtype].
    assert spec.tolerances[dtype] == tolerances.DEFAULTS[dtype]
    assert _bench_tolerance(monkeypatch, spec, dtype) == spec.tolerances[dtype]


def test_tests_and_bench_check_with_the_same_op_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_op(tmp_path, toml=MINIMAL + "\n[tolerances]\nfloat16 = [5e-3, 2e-3]\n")
    (spec,) = library.discover(tmp_path)
    assert spec.tolerances == {"float32": tolerances.DEFAULTS["float32"], "float16": (5e-3, 2e-3)}
    for dtype in spec.dtypes:
        assert _bench_tolerance(monkeypatch, spec, dtype) == spec.tolerances[dtype]


def test_every_shipped_op_is_benched_with_its_test_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    for spec in library.discover():
        for dtype in spec.bench_dtypes:
            assert _bench_tolerance(monkeypatch, spec, dtype) == spec.tolerances[dtype], (spec.name, dtype)


def test_a_spec_without_tolerances_is_benched_with_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SimpleNamespace(name="fake", kind="cpu", tolerances={}, seeds=[0], bench_shapes=[{"n": 1}])
    for dtype, pair in tolerances.DEFAULTS.items():
        assert _bench_tolerance(monkeypatch, spec, dtype) == pair


@pytest.mark.parametrize("expr, expected", [
    ("soft", ["softmax", "softmax_triton"]),
    ("softmax and not triton", ["softmax"]),
    ("(vector or norm) and not soft", ["layernorm", "vector_add"]),
    ("SOFTMAX_TRITON", ["softmax_triton"]),
])
def test_select_works_like_pytest_k(tmp_path: Path, expr: str, expected: list[str]) -> None:
    for name in ("softmax", "softmax_triton", "layernorm", "vector_add"):
        make_op(tmp_path, name, files=(f"{name}.cpp",))
    assert [s.name for s in library.discover(tmp_path, select=expr)] == expected


@pytest.mark.parametrize("expr", ["soft and", "a; import os", "x == y"])
def test_bad_select_is_a_config_error(tmp_path: Path, expr: str) -> None:
    make_op(tmp_path)
    with pytest.raises(ConfigError, match="-k"):
        library.discover(tmp_path, select=expr)


@pytest.mark.parametrize("change, message", [
    (("kind", '"cpu"', '"rocm"'), "kind"),
    (("flops", '"n"', '"n * m"'), "flops = 'n \\* m' fails"),
    (("dtypes", '["float32", "float16"]', '["float8"]'), "float8"),
    (("shape", "{ n = 5 }", "{ m = 5 }"), "every shape needs"),
    (("typo", 'bytes =', 'byte ='), "unknown key"),
    (("tolerance", "", "\n[tolerances]\nbfloat16 = [1, 1]\n"), "tolerances.bfloat16"),
])
def test_mistakes_in_op_toml_name_the_file_and_key(tmp_path: Path, change: tuple[str, str, str], message: str) -> None:
    _, old, new = change
    toml = MINIMAL.replace(old, new, 1) if old else MINIMAL + new  # a [table] must come last
    make_op(tmp_path, toml=toml)
    with pytest.raises(ConfigError, match=message) as info:
        library.discover(tmp_path)
    assert "toy/op.toml" in str(info.value)


def test_missing_reference_or_sources_are_reported(tmp_path: Path) -> None:
    folder = make_op(tmp_path, files=())
    with pytest.raises(ConfigError, match="no sources"):
        library.discover(tmp_path)
    (folder / "toy.cpp").write_text("")
    (folder / "reference.py").unlink()
    with pytest.raises(ConfigError, match="reference.py"):
        library.discover(tmp_path)


PTXAS_LOG = """\
[1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /src/kernels/k/k.cu -o k.cuda.o -Xptxas=-v
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6scalarPfi' for 'sm_90'
ptxas info    : Function properties for _Z6scalarPfi
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 128 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4fastPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z4fastPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 368 bytes cmem[0]
[2/3] c++ -MMD -MF binding.o.d -c /src/kernels/k/binding.cpp -o binding.o
[3/3] c++ binding.o k.cuda.o -shared -o kernellab_k.so
"""


def test_ptxas_reports_are_read_per_kernel_and_source() -> None:
    found = compilerlog.parse_ptxas(PTXAS_LOG)
    assert list(found) == ["/src/kernels/k/k.cu"]
    slow, fast = found["/src/kernels/k/k.cu"]
    assert (slow.function, slow.arch, slow.registers, slow.spill_stores, slow.spill_loads, slow.stack_bytes,
            slow.shared_bytes) == ("_Z6scalarPfi", "sm_90", 40, 4, 12, 8, 128)
    assert (fast.function, fast.registers, fast.spill_stores, fast.shared_bytes) == ("_Z4fastPKfPfi", 12, 0, 0)


def test_compiler_messages_keep_the_compiler_and_drop_the_commands() -> None:
    log = """[1/2] c++ -MMD -MF bad.o.d -c /x/bad.cpp -o bad.o
FAILED: bad.o
c++ -MMD -MF bad.o.d -c /x/bad.cpp -o bad.o
/x/bad.cpp:3:12: error: 'nope' was not declared in this scope
    3 |   return nope;
      |          ^~~~
ninja: build stopped: subcommand failed.
"""
    assert compilerlog.compiler_messages(log).splitlines() == [
        "/x/bad.cpp:3:12: error: 'nope' was not declared in this scope",
        "    3 |   return nope;",
        "      |          ^~~~",
    ]


def test_short_names_keep_template_arguments() -> None:
    assert compilerlog.short_name("void k<float, 4>(float const*, int)") == "k<float, 4>"
    assert compilerlog.short_name("void ns::f(int)") == "ns::f"
    assert compilerlog.short_name("void (anonymous namespace)::k<__half, 8>(__half const*)") == "k<__half, 8>"


def test_build_table_lists_kernels_skips_and_failures(tmp_path: Path) -> None:
    make_op(tmp_path, "aa")
    make_op(tmp_path, "bb")
    make_op(tmp_path, "cc")
    a, b, c = library.discover(tmp_path)
    resources = tuple(r for rows in compilerlog.parse_ptxas(PTXAS_LOG).values() for r in rows)
    build = extensions.Build("kernellab_aa", tmp_path / "a.so", tmp_path, 12.34, True, resources)
    table = library.build_table([
        library.BuildOutcome(a, build),
        library.BuildOutcome(b, note="Triton compiles at the first call"),
        library.BuildOutcome(c, note="cc does not compile:\nc.cu(3): error: x", failed=True),
    ])
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["op", "status", "seconds", "kernel"]
    assert lines[1].split()[:4] == ["aa", "compiled", "12.3", "scalar"]
    assert lines[1].split()[-4:] == ["40", "4/12", "8", "128"]
    assert lines[2].split()[0] == "fast"
    assert "skipped" in lines[3] and "Triton compiles" in lines[3]
    assert "FAILED" in lines[4]
    assert table.endswith("cc: cc does not compile:\nc.cu(3): error: x")


def test_an_op_needing_a_newer_cuda_says_so_when_built_and_tested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = MINIMAL.replace('kind = "cpu"', 'kind = "cuda"') + 'min_cuda = ["12.8", "tcgen05 instructions"]\n'
    spec = library.parse_spec(make_op(tmp_path, toml=toml, files=("toy.cu",)) / "op.toml")
    assert spec.min_cuda == ("12.8", "tcgen05 instructions")
    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    expected = "toy needs CUDA 12.8 or newer (tcgen05 instructions); this is CUDA 12.4"
    assert library.unbuildable(spec) == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert library.unavailable(spec) == expected, "the op's tests skip with the same reason"
    monkeypatch.setattr(torch.version, "cuda", "12.10")
    assert library.unbuildable(spec) is None and library.unavailable(spec) is None


def test_a_bad_min_cuda_names_the_form(tmp_path: Path) -> None:
    folder = make_op(tmp_path, toml=MINIMAL + 'min_cuda = "12.8"\n')
    with pytest.raises(ConfigError, match=r'min_cuda must be \["X.Y", "what needs it"\]'):
        library.parse_spec(folder / "op.toml")


def test_torch_compile_baselines_keep_inductors_cache_in_kernellabs(tmp_path, monkeypatch) -> None:
    """A compiled baseline's graphs go to $KERNELLAB_CACHE/inductor (a host folder in containers), so a later bench
    takes them instead of compiling again; a TORCHINDUCTOR_CACHE_DIR the user set is left as it is."""
    import torch

    from kernellab.ops import library

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(torch, "compile", lambda fn: fn)  # only where the cache goes is under test, not inductor
    assert library._compiled(lambda x: x + 1)(1) == 2
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    library._compiled(lambda x: x)(0)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
