"""`bench --compare` between runs: another machine is judged relative to baselines, -k limits the scope.

Every result here is synthetic (bench_fakes.row): samples with a known spread, no live timing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench_fakes import h100, row, run_doc
from kernellab import bench
from kernellab.bench import compare, results

MM = {"m": 8192, "n": 8192, "k": 8192}


def _matmul(name: str, tensorcore_ms: float, torch_ms: float, seed: int, **env: Any) -> dict:
    """A matmul run: the tensor-core kernel against torch.matmul (the eager baseline)."""
    rows = [row("matmul", "tensorcore", tensorcore_ms, seed=seed, shape=MM),
            row("matmul", "eager", torch_ms, role="baseline", seed=seed + 1, shape=MM)]
    return run_doc(name, rows, h100(**env))


def _one(report: compare.Report, impl: str) -> dict:
    (r,) = [r for r in report.rows if r["impl"] == impl]
    return r


def test_on_another_gpu_a_kernel_as_much_slower_as_its_baseline_is_no_regression() -> None:
    # The case seen between two H100s: the kernel +3.4%, torch.matmul +5.7% in the same run.
    old = _matmul("reference", 1.000, 2.000, seed=0)
    new = _matmul("other-h100", 1.034, 2.114, seed=10, uuid="GPU-5e21")
    report = compare.compare(old, new)
    assert report.machine == ["GPU UUID: GPU-0b7a -> GPU-5e21"]
    kernel = _one(report, "tensorcore")
    assert kernel["verdict"] == "same" and kernel["baseline"] == "eager"
    assert kernel["change"] == pytest.approx(1.034 / 1.057 - 1, abs=0.003)
    assert kernel["lo"] < kernel["change"] < kernel["hi"]
    assert _one(report, "eager")["verdict"] == "reference" and not report.regressions
    # On one machine the same numbers are a regression: the switch is what fixed the false alarm.
    same_machine = compare.compare(old, dict(new, environment=old["environment"]))
    assert _one(same_machine, "tensorcore")["verdict"] == "slower"


def test_on_another_gpu_a_slowdown_against_the_baseline_is_still_a_regression() -> None:
    old = _matmul("reference", 1.000, 2.000, seed=0)
    new = _matmul("other-h100", 1.260, 2.100, seed=10, uuid="GPU-5e21")
    report = compare.compare(old, new)
    (regression,) = report.regressions
    assert regression["impl"] == "tensorcore" and regression["verdict"] == "slower"
    assert regression["change"] == pytest.approx(1.26 / 1.05 - 1, abs=0.005)
    faster = compare.compare(old, _matmul("other-h100", 0.800, 2.000, seed=10, uuid="GPU-5e21"))
    assert _one(faster, "tensorcore")["verdict"] == "faster"


@pytest.mark.parametrize("change, named", [
    ({"uuid": "GPU-5e21"}, "GPU UUID: GPU-0b7a -> GPU-5e21"),
    ({"driver": "580.65.06"}, "driver: 570.86.15 -> 580.65.06"),
    ({"max_sm_mhz": 1755}, "max_sm_mhz: 1980 -> 1755"),
])
def test_a_new_gpu_driver_or_clocks_switch_to_relative_timing(change: dict, named: str) -> None:
    old = _matmul("reference", 1.0, 2.0, seed=0)
    new = run_doc("new", old["rows"], h100(**change))
    report = compare.compare(old, new)
    assert report.machine == [named] and report.relative
    line = compare.relative_line(report)
    assert named in line and "\n" not in line
    assert line in compare.to_markdown(report)


def test_software_changes_alone_keep_absolute_times() -> None:
    old = _matmul("reference", 1.0, 2.0, seed=0)
    new_env = dict(h100(), torch="2.12.0", image={"id": "sha256:ab", "lock_sha256": "cd"})
    report = compare.compare(old, run_doc("new", old["rows"], new_env))
    assert not report.relative and report.environment
    assert "relative to baselines" not in compare.to_markdown(report)
    assert "threshold" in _one(report, "eager") and _one(report, "eager")["verdict"] == "same"


def test_a_noisy_baseline_raises_the_bar_of_the_relative_verdict() -> None:
    # 8% slower relative to a baseline that spreads 5%: the two noises in quadrature, doubled, exceed 8%.
    old = run_doc("old", [row("matmul", "tensorcore", 1.00, seed=1, shape=MM),
                          row("matmul", "eager", 2.0, role="baseline", rel_noise=0.05, seed=2, shape=MM)])
    new = run_doc("new", [row("matmul", "tensorcore", 1.08, seed=3, shape=MM),
                          row("matmul", "eager", 2.0, role="baseline", rel_noise=0.05, seed=4, shape=MM)],
                  h100(uuid="GPU-5e21"))
    kernel = _one(compare.compare(old, new), "tensorcore")
    assert kernel["threshold"] > 0.08 and kernel["verdict"] == "same"


def test_without_a_baseline_timed_in_both_runs_another_machine_is_not_comparable() -> None:
    old = _matmul("reference", 1.0, 2.0, seed=0)
    new = run_doc("new", [row("matmul", "tensorcore", 1.5, seed=10, shape=MM),
                          row("matmul", "eager", None, role="baseline", status="error", shape=MM)],
                  h100(uuid="GPU-5e21"))
    report = compare.compare(old, new)
    assert _one(report, "tensorcore")["verdict"] == "not comparable"
    assert "no baseline timed in both runs" in _one(report, "tensorcore")["why"]
    assert [r["verdict"] for r in report.regressions] == ["now failing"]  # the baseline itself broke


def test_with_k_the_ops_left_out_are_not_gone() -> None:
    old = run_doc("full", [row("softmax", "kernellab", 0.1), row("softmax", "eager", 0.2, role="baseline"),
                           row("matmul", "tensorcore", 1.0, shape=MM), row("matmul", "eager", 2.0, role="baseline", shape=MM),
                           row("layernorm", "kernellab", 0.3)])
    new = run_doc("softmax-only", [row("softmax", "kernellab", 0.1, seed=5),
                                   row("softmax", "eager", 0.2, role="baseline", seed=6)], select="softmax")
    report = compare.compare(old, new)
    assert {r["op"] for r in report.rows} == {"softmax"}
    assert not any(r["verdict"] == "gone" for r in report.rows)
    assert report.left_out == 3
    assert "Only ops matching -k 'softmax' were run: 3 rows of other ops in full left out." in compare.to_markdown(report)


def test_with_k_a_selected_row_that_disappeared_is_still_gone() -> None:
    old = run_doc("full", [row("softmax", "kernellab", 0.1), row("softmax", "kernellab", 0.4, shape={"n": 65536}),
                           row("matmul", "tensorcore", 1.0, shape=MM)])
    new = run_doc("softmax-only", [row("softmax", "kernellab", 0.1, seed=5)], select="soft")
    verdicts = {(r["op"], r["shape"]): r["verdict"] for r in compare.compare(old, new).rows}
    assert verdicts == {("softmax", "n=4096"): "same", ("softmax", "n=65536"): "gone"}


def test_without_k_a_missing_op_is_gone() -> None:
    old = run_doc("full", [row("softmax", "kernellab", 0.1), row("matmul", "tensorcore", 1.0, shape=MM)])
    new = run_doc("later", [row("softmax", "kernellab", 0.1, seed=5)])
    report = compare.compare(old, new)
    assert _one(report, "tensorcore")["verdict"] == "gone" and report.left_out == 0


def test_the_command_line_exits_zero_across_machines_and_says_why(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    results.write(tmp_path / "old", _matmul("reference", 1.000, 2.000, seed=0))
    results.write(tmp_path / "new", _matmul("other-h100", 1.034, 2.114, seed=10, uuid="GPU-5e21"))
    code = bench.main(["--compare", str(tmp_path / "old"), "--new", str(tmp_path / "new")])
    out = capsys.readouterr().out
    assert code == 0
    assert "Compared relative to baselines" in out and "GPU UUID: GPU-0b7a -> GPU-5e21" in out
    assert "| same (time relative to eager) |" in out


def test_a_tiny_case_measured_several_times_is_judged_by_what_moved_between_them() -> None:
    # 3 us against 3.18 us (+6%), each measurement tight (+-0.5%): one measurement alone calls that a regression.
    old_row, new_row = row("softmax", "kernellab", 0.0030, seed=1), row("softmax", "kernellab", 0.00318, seed=2)
    plain = compare.compare(run_doc("old", [old_row]), run_doc("new", [new_row]))
    assert _one(plain, "kernellab")["verdict"] == "slower"
    # Its five measurements' medians moved by about 5% (as a 3 us kernel's did on the H200): +6% is within that.
    old_row["repeat_medians_ms"] = [0.0030, 0.00318, 0.00290, 0.00310, 0.00325]
    repeated = compare.compare(run_doc("old", [old_row]), run_doc("new", [new_row]))
    judged = _one(repeated, "kernellab")
    assert judged["verdict"] == "same" and not repeated.regressions
    assert judged["threshold"] == pytest.approx(2 * 0.0447, abs=0.003)  # 2x the medians' stdev / mean
    # A change well past that spread is still a regression.
    worse = compare.compare(run_doc("old", [old_row]), run_doc("new", [row("softmax", "kernellab", 0.0036, seed=2)]))
    assert _one(worse, "kernellab")["verdict"] == "slower"


def _sources(**files: str) -> dict[str, Any]:
    """results.json's `sources` entry of one op: its files by path and content hash, and the digest over them."""
    return {"sha256": "".join(sorted(files.values()))[:64].ljust(64, "0"), "files": files}


def test_the_report_says_which_kernel_files_changed_between_the_runs() -> None:
    """A rerun after an edit: the report names the files each op compiled differently, the ops whose code is the
    same, and an old run from before kernellab recorded sources. The verdicts stay the timings' own."""
    rows = [row("softmax", "kernellab", 0.1), row("layernorm", "kernellab", 0.3), row("rmsnorm", "kernellab", 0.2)]
    old = run_doc("before", rows)
    old["sources"] = {"softmax": _sources(**{"softmax/softmax.cu": "a1", "_common/rowwise.cuh": "b1"}),
                      "layernorm": _sources(**{"layernorm/layernorm.cu": "c1", "_common/rowwise.cuh": "b1"})}
    new = run_doc("after", [dict(r, samples_ms=list(r["samples_ms"])) for r in rows])
    new["sources"] = {"softmax": _sources(**{"softmax/softmax.cu": "a1", "_common/rowwise.cuh": "b2"}),
                      "layernorm": _sources(**{"layernorm/layernorm.cu": "c1", "_common/rowwise.cuh": "b1"}),
                      "rmsnorm": _sources(**{"rmsnorm/rmsnorm.cu": "d1"})}
    report = compare.compare(old, new)
    assert report.sources == [
        f"layernorm: the same ({new['sources']['layernorm']['sha256'][:12]})",
        f"rmsnorm: {new['sources']['rmsnorm']['sha256'][:12]}; the old run did not build it",
        f"softmax: {old['sources']['softmax']['sha256'][:12]} -> {new['sources']['softmax']['sha256'][:12]}, "
        "1 of 2 files changed: _common/rowwise.cuh",
    ]
    text = compare.to_markdown(report)
    assert "Kernel sources, old -> new (what each op compiled):\n- layernorm: the same" in text
    assert {r["verdict"] for r in report.rows} == {"same"}


def test_a_file_unreadable_in_either_run_leaves_the_answer_open_and_an_old_run_without_sources_says_so() -> None:
    rows = [row("softmax", "kernellab", 0.1)]
    old, new = run_doc("before", rows), run_doc("after", rows)
    new["sources"] = {"softmax": _sources(**{"softmax/softmax.cu": "a1", "_common/rowwise.cuh": "unreadable"})}
    assert compare.compare(old, new).sources == [
        f"softmax: {new['sources']['softmax']['sha256'][:12]}; the old run recorded none (made before kernellab did)"]
    old["sources"] = new["sources"]
    assert compare.compare(old, new).sources == ["softmax: unknown, 1 file could not be read: _common/rowwise.cuh"]


def test_a_damaged_sources_entry_counts_as_none_recorded() -> None:
    rows = [row("softmax", "kernellab", 0.1)]
    old, new = run_doc("before", rows), run_doc("after", rows)
    old["sources"] = {"softmax": "edited by hand", "layernorm": {"sha256": 3}}
    new["sources"] = {"softmax": _sources(**{"softmax/softmax.cu": "a1"}), "rmsnorm": None}
    assert compare.compare(old, new).sources == [
        f"softmax: {new['sources']['softmax']['sha256'][:12]}; the old run recorded none (made before kernellab did)"]
    assert not any("Kernel sources" in line for line in results.header(old))


def test_runs_without_kernel_sources_compare_as_before() -> None:
    report = compare.compare(run_doc("a", [row("softmax", "kernellab", 0.1)]),
                             run_doc("b", [row("softmax", "kernellab", 0.1, seed=3)]))
    assert report.sources == [] and "Kernel sources" not in compare.to_markdown(report)
