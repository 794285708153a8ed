"""benchmarks/kernel_ab.py without a GPU: its arguments, the base's kernels/ taken from git, and the table it prints.
(Its timing runs on the GPU machine: results/h200-norms has its figures for the forwards' fitted blocks, H200.)"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import ROOT

spec = importlib.util.spec_from_file_location("kernel_ab", ROOT / "benchmarks" / "kernel_ab.py")
assert spec is not None and spec.loader is not None
kernel_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_ab)


def test_shapes_parse_and_a_bad_one_is_one_sentence() -> None:
    assert kernel_ab.parse_shapes("4x8192, 16384x1024,") == [{"rows": 4, "cols": 8192}, {"rows": 16384, "cols": 1024}]
    with pytest.raises(SystemExit, match=r"--shapes: '4x' is not ROWSxCOLS"):
        kernel_ab.parse_shapes("4x")


def test_the_base_is_a_revisions_kernels_tree_or_a_folder_holding_one(tmp_path: Path) -> None:
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    tree = kernel_ab.export_base("HEAD", tmp_path / "head")
    committed = subprocess.run(["git", "-C", str(ROOT), "show", "HEAD:kernels/layernorm/op.toml"],
                               capture_output=True, text=True, check=True).stdout
    assert (tree / "kernels" / "layernorm" / "op.toml").read_text() == committed
    assert (tree / "kernels" / "_common" / "rowwise.cuh").is_file()
    assert kernel_ab.export_base(str(tree), tmp_path / "unused") == tree  # a folder with kernels/ is taken as it is
    with pytest.raises(SystemExit, match=r"--base no-such-rev: neither a folder with kernels/ nor a git revision"):
        kernel_ab.export_base("no-such-rev", tmp_path / "bad")


def test_the_table_has_each_sides_kernels_the_change_and_the_errors() -> None:
    def side(us: float, kernels: dict, error: float) -> dict:
        return {"shape": {"rows": 16384, "cols": 1024}, "dtype": "float16", "us": us, "kernels": kernels,
                "max_error": error}

    base = side(72.3, {"void (anonymous namespace)::layernorm_backward_kernel<__half, 8, 2>(...)": 70.2,
                       "void kl::column_sums<__half>(float const*, int, int, __half*, __half*)": 2.1}, 0.00195)
    new = side(51.7, {"void (anonymous namespace)::layernorm_backward_kernel<__half, 8, 2, (kl::Sums)0>(...)": 49.6,
                      "void kl::column_sums<__half>(float const*, int, int, __half*, __half*)": 2.1}, 0.00195)
    lines = kernel_ab.table([base], [new]).splitlines()
    assert lines[0].startswith("| rows x cols | dtype | base | this checkout | change |")
    assert lines[2] == ("| 16384x1024 | float16 | 72.30 us (layernorm_backward_kernel 70.20 + kl::column_sums 2.10) | "
                        "51.70 us (layernorm_backward_kernel 49.60 + kl::column_sums 2.10) | -28.5% | 0.00195 / 0.00195 |")


def test_a_case_of_several_kernels_also_shows_each_calls_span_and_its_change() -> None:
    # Kernels that overlap (a programmatic dependent launch) sum to more than the call takes: the span says so.
    base = {"shape": {"rows": 4, "cols": 8192}, "dtype": "float32", "us": 5.5, "span_us": 6.4,
            "kernels": {"void kl::backward_kernel<float>(...)": 4.2, "void kl::weight_grads<float>(...)": 1.3},
            "max_error": 1.9e-06}
    new = dict(base, us=6.0, span_us=4.8, kernels={"void kl::backward_kernel<float>(...)": 4.2,
                                                     "void kl::weight_grads<float>(...)": 1.8})
    row = kernel_ab.table([base], [new]).splitlines()[2]
    assert row == ("| 4x8192 | float32 | 5.50 us (kl::backward_kernel 4.20 + kl::weight_grads 1.30; span 6.40) | "
                   "6.00 us (kl::backward_kernel 4.20 + kl::weight_grads 1.80; span 4.80) | +9.1% (span -25.0%) | "
                   "1.9e-06 / 1.9e-06 |")


def test_more_versions_are_a_column_each_with_their_change_against_the_base() -> None:
    def side(us: float, error: float) -> dict:
        return {"shape": {"rows": 4096, "cols": 4096}, "dtype": "float16", "us": us,
                "kernels": {"void (anonymous namespace)::layernorm_backward_kernel<__half, 8, 1>(...)": us},
                "max_error": error}

    lines = kernel_ab.table([side(41.06, 0.0078)], [side(37.04, 0.0078)],
                            [(".scratch/e1", [side(34.56, 741.0)]), ("HEAD~3", [side(45.17, 0.0078)])]).splitlines()
    assert lines[0] == ("| rows x cols | dtype | base | this checkout | change | .scratch/e1 | change | HEAD~3 "
                        "| change | max error (base / this / .scratch/e1 / HEAD~3) |")
    assert lines[1].count("|") == lines[0].count("|")
    # A version whose result is wrong shows it beside its time: a scratch copy that skips work is a bound, not a win.
    assert lines[2] == ("| 4096x4096 | float16 | 41.06 us | 37.04 us | -9.8% | 34.56 us | -15.8% | 45.17 us | +10.0% "
                        "| 0.0078 / 0.0078 / 741 / 0.0078 |")


def test_rounds_keep_each_cases_least_time_and_least_span() -> None:
    def rec(us: float, span: float | None) -> dict:
        return {"shape": {"rows": 4, "cols": 8192}, "dtype": "float32", "us": us, "span_us": span,
                "kernels": {"a": us / 2, "b": us / 2}, "max_error": 0.0}

    first = [rec(5.0, 6.5), rec(9.0, 9.9)]
    second = [rec(5.4, 6.1), rec(8.0, None)]
    best = kernel_ab.best_of([first, second])
    assert [r["us"] for r in best] == [5.0, 8.0]
    assert best[0]["span_us"] == 6.1  # the least span of the rounds, though another round had the least time
    assert best[1]["span_us"] is None  # a round without a span: that round's record as it was
    assert first[0]["span_us"] == 6.5  # the rounds' own records are left as they were


@pytest.mark.parametrize("argv, message", [
    (["-k", "no_such_op"], r"-k no_such_op: no such op; ops: .*layernorm"),
    (["-k", "vector_add", "--pass", "backward"], r"vector_add has no backward"),
    (["-k", "layernorm", "--calls", "0"], r"--calls: at least 1"),
    (["-k", "layernorm", "--rounds", "0"], r"--rounds: at least 1"),
    (["-k", "layernorm", "--also", "no-such-rev"], r"--also no-such-rev: neither a folder with kernels/ nor a git"),
])
def test_bad_arguments_are_one_sentence(argv: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_ab.py"), *argv], capture_output=True,
                            text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert re.search(message, result.stderr), result.stderr


def test_launch_records_read_as_one_line_each() -> None:
    record = {"grid": [264, 1, 1], "block": [512, 1, 1], "registers per thread": 64, "shared memory": 33792,
              "est. achieved occupancy %": 50}
    assert kernel_ab.launch_text(record) == "264 blocks of 512, 64 registers, 33.0 KB shared, 50% occupancy"
    assert kernel_ab.launch_text({"grid": [128, 2, 1], "block": [1024, 1, 1]}) == "128 x 2 blocks of 1024"
    # Only trailing 1s go: column_sums over 32 columns or fewer is a grid of 1 x 2, not of 2.
    assert kernel_ab.launch_text({"grid": [1, 2, 1], "block": [1024, 1, 1]}) == "1 x 2 blocks of 1024"
    assert kernel_ab.launch_text({}) == "? blocks of ?"  # a trace without the launch fields
    # The profiler's estimate is 0 past 48 KB of shared memory (H200: 132 blocks of 1024 at 65 KB ran): not shown.
    big = dict(record, grid=[132, 1, 1], block=[1024, 1, 1], **{"shared memory": 66560, "est. achieved occupancy %": 0})
    assert kernel_ab.launch_text(big) == "132 blocks of 1024, 64 registers, 65.0 KB shared"


def test_the_launch_table_lists_only_the_kernels_whose_launches_differ() -> None:
    def side(grid: int, sums_grid: int | None) -> dict:
        launches = {"void (anonymous namespace)::layernorm_backward_kernel<__half, 8, 1>(...)":
                    [{"grid": [grid, 1, 1], "block": [512, 1, 1], "registers per thread": 64}]}
        if sums_grid is not None:
            launches["void kl::column_sums<__half>(float const*, int, int, __half*, __half*)"] = [
                {"grid": [sums_grid, 2, 1], "block": [1024, 1, 1]}]
        return {"shape": {"rows": 4096, "cols": 4096}, "dtype": "float16", "launches": launches}

    # The same launches in every version: one line.
    same = kernel_ab.launch_table([side(264, 128)], [side(264, 128)])
    assert same.startswith("Launches: the same in every version")
    # A version that fits fewer blocks (clusters of 4) and one that launches a kernel the base does not.
    lines = kernel_ab.launch_table([side(264, None)], [side(248, None)], [("c2", [side(264, 128)])]).splitlines()
    assert lines[2] == "| rows x cols | dtype | kernel | base | this checkout | c2 |"
    assert lines[4] == ("| 4096x4096 | float16 | layernorm_backward_kernel | 264 blocks of 512, 64 registers | "
                        "248 blocks of 512, 64 registers | 264 blocks of 512, 64 registers |")
    assert lines[5] == "| 4096x4096 | float16 | kl::column_sums | (none) | (none) | 128 x 2 blocks of 1024 |"
    assert len(lines) == 6
    # A case whose trace had no launch records reads as none, not as an error.
    bare = {"shape": {"rows": 4, "cols": 8192}, "dtype": "float32"}
    assert kernel_ab.launch_table([bare], [bare]).startswith("Launches: the same")


def test_launches_of_one_kernel_name_read_alike_in_any_order() -> None:
    # Two instantiations sharing a short name, and two launch shapes of one kernel, in either order: no difference.
    a = {"grid": [264, 1, 1], "block": [512, 1, 1]}
    b = {"grid": [396, 1, 1], "block": [256, 1, 1]}

    def side(launches: dict) -> dict:
        return {"shape": {"rows": 4096, "cols": 4096}, "dtype": "float16", "launches": launches}

    first = side({"k<__half, 8, 1>(...)": [a], "k<__half, 8, 2>(...)": [b]})
    second = side({"k<__half, 8, 2>(...)": [b], "k<__half, 8, 1>(...)": [a]})
    third = side({"k<__half, 8, 1>(...)": [b, a]})
    assert kernel_ab.launch_table([first], [second], [("x", [third])]).startswith("Launches: the same")
    lines = kernel_ab.launch_table([first], [side({"k<__half, 8, 1>(...)": [a]})]).splitlines()
    assert lines[4] == "| 4096x4096 | float16 | k | 264 blocks of 512 / 396 blocks of 256 | 264 blocks of 512 |"
