"""benchmarks/versus_best.py on made-up runs: the fastest valid baseline per case, the verdict from the bench's own
interval, a baseline that failed its check named and left out, and the counts."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from kernellab import ROOT

spec = importlib.util.spec_from_file_location("versus_best", ROOT / "benchmarks" / "versus_best.py")
assert spec is not None and spec.loader is not None
versus_best = importlib.util.module_from_spec(spec)
spec.loader.exec_module(versus_best)


def row(impl: str, us: float, *, pass_: str = "forward", cols: int = 1024, status: str = "ok",
        speedups: dict[str, tuple[float, float, float]] | None = None, pct: float | None = 80.0) -> dict[str, Any]:
    r: dict[str, Any] = {"op": "rmsnorm", "shape": {"rows": 4, "cols": cols}, "dtype": "float32", "pass": pass_,
                         "impl": impl, "status": status, "pct_mem": pct,
                         "role": "candidate" if impl in ("kernellab", "wgmma") else "baseline"}
    if status == "ok":
        r["stats"] = {"median": us / 1e3}
        r["speedups"] = {k: {"value": v, "lo": lo, "hi": hi} for k, (v, lo, hi) in (speedups or {}).items()}
    return r


def test_each_case_is_judged_against_its_fastest_valid_baseline() -> None:
    doc = {"rows": [
        # ahead of both baselines: judged against the faster one (liger), not eager
        row("kernellab", 10.0, speedups={"eager": (3.0, 2.9, 3.1), "liger": (1.2, 1.1, 1.3)}),
        row("eager", 30.0), row("liger", 12.0),
        # below: the whole interval under 1.0x
        row("kernellab", 10.0, pass_="backward", speedups={"compile": (0.95, 0.94, 0.96)}),
        row("compile", 9.5, pass_="backward"), row("liger", 0.0, pass_="backward", status="wrong"),
        # within noise: the interval holds 1.0x
        row("kernellab", 10.0, cols=4096, speedups={"liger": (0.999, 0.995, 1.004)}),
        row("liger", 9.99, cols=4096),
    ]}
    lines = versus_best.table([doc]).splitlines()
    body = [line for line in lines if line.startswith("| rmsnorm")]
    assert len(body) == 3
    assert "| liger 12.0 us | 1.20x [1.10, 1.30] |" in body[0]
    assert "compile 9.5 us (liger: wrong) | 0.95x [0.94, 0.96] **below**" in body[1]
    assert "0.999x [0.995, 1.004] (within noise)" in body[2] and "| 4x4096 |" in body[2]
    assert lines[-1] == ("3 rows: 1 ahead of the best baseline (the whole interval above 1.0x), 1 within noise, "
                         "1 below.")


def test_another_candidate_is_not_a_baseline_and_a_failed_one_is_named() -> None:
    doc = {"rows": [row("kernellab", 10.0, speedups={"eager": (1.5, 1.4, 1.6)}), row("wgmma", 5.0), row("eager", 15.0),
                    row("compile", 0.0, status="error")]}
    body = [line for line in versus_best.table([doc]).splitlines() if line.startswith("| rmsnorm")]
    assert body == ["| rmsnorm | 4x1024 | float32 | forward | 10.0 us | eager 15.0 us (compile: error) | "
                    "1.50x [1.40, 1.60] | 80% | 80% |"]


def test_cases_that_cannot_be_judged_are_counted_and_said_why() -> None:
    failed = row("kernellab", 0.0, status="wrong")
    failed["reason"] = "output does not match"
    doc = {"rows": [failed, row("eager", 5.0),
                    row("kernellab", 5.0, pass_="full", speedups={}), row("liger", 0.0, pass_="full", status="wrong"),
                    row("kernellab", 5.0, pass_="backward", speedups={}), row("eager", 6.0, pass_="backward")]}
    lines = versus_best.table([doc]).splitlines()
    assert lines[-4] == "0 rows: 0 ahead of the best baseline (the whole interval above 1.0x), 0 within noise, " \
                        "0 below; 3 not judged:"
    assert lines[-3:] == ["- rmsnorm rows=4 cols=1024 float32 forward: kernellab wrong (output does not match)",
                          "- rmsnorm rows=4 cols=1024 float32 full: no baseline was timed (liger: wrong)",
                          "- rmsnorm rows=4 cols=1024 float32 backward: the run has no speedup of kernellab over eager"]


def test_a_case_in_two_runs_is_refused() -> None:
    doc = {"rows": [row("kernellab", 10.0, speedups={"eager": (1.5, 1.4, 1.6)}), row("eager", 15.0)]}
    with pytest.raises(SystemExit, match=r"kernellab at rmsnorm, rows=4 cols=1024, float32, forward is in two"):
        versus_best.table([doc, doc])


def test_a_missing_run_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^no results.json at .*nowhere"):
        versus_best.main([str(tmp_path / "nowhere")])


def test_the_committed_h200_table_is_what_the_script_prints() -> None:
    runs = [ROOT / "results" / "h200-norms" / op for op in ("layernorm", "rmsnorm", "softmax")]
    printed = versus_best.table([versus_best.results.load(run, samples=False) for run in runs])
    assert printed in (ROOT / "results" / "h200-norms" / "README.md").read_text()


def test_a_run_kept_without_its_samples_still_tabulates(capsys: pytest.CaptureFixture[str]) -> None:
    run = ROOT / "results" / "h100-norms"  # committed without samples.json.gz
    assert not (run / "samples.json.gz").exists()
    versus_best.main([str(run)])
    assert any(line.startswith("90 rows: ") for line in capsys.readouterr().out.splitlines())


def test_cases_with_a_cuda_graph_figure_get_a_second_table() -> None:
    """The bench's graph_ms (cases under 10 us) beside the same best baseline's: its ratio, or '-' where it has none."""
    graphed = row("kernellab", 5.5, speedups={"liger": (0.93, 0.92, 0.94)}) | {"graph_ms": 0.0026}
    liger = row("liger", 5.1) | {"graph_ms": 0.0028}
    lone = row("kernellab", 5.0, cols=4096, speedups={"eager": (1.5, 1.4, 1.6)}) | {"graph_ms": 0.0030}
    doc = {"rows": [graphed, liger, row("kernellab", 50.0, cols=2048, speedups={"liger": (1.1, 1.05, 1.15)}),
                    row("liger", 55.0, cols=2048), lone, row("eager", 7.5, cols=4096)]}
    lines = versus_best.table([doc]).splitlines()
    counts = next(i for i, line in enumerate(lines) if line.startswith("3 rows:"))
    graph = [line for line in lines[counts:] if line.startswith("| rmsnorm")]
    assert graph == ["| rmsnorm | 4x1024 | float32 | forward | 2.60 us | liger 2.80 us | 1.08x |",
                     "| rmsnorm | 4x4096 | float32 | forward | 3.00 us | eager (none) | - |"]
    assert "0.93x [0.92, 0.94] **below**" in lines[2]  # the verdict stays the events' one


def test_no_graph_figures_no_second_table() -> None:
    doc = {"rows": [row("kernellab", 10.0, speedups={"eager": (1.5, 1.4, 1.6)}), row("eager", 15.0)]}
    assert "CUDA graphs" not in versus_best.table([doc])


def test_a_case_measured_several_times_is_marked_and_explained() -> None:
    mine = row("kernellab", 5.7, cols=8192, speedups={"liger": (0.90, 0.69, 0.98)})
    mine["speedups"]["liger"]["repeats"] = [0.97, 0.87, 0.90, 0.97, 0.80]
    out = versus_best.table([{"rows": [mine, row("liger", 5.5, cols=8192)]}]).splitlines()
    (body,) = [line for line in out if line.startswith("| rmsnorm")]
    assert "| 0.90x [0.69, 0.98] (x5) **below** |" in body
    assert any(line.startswith("(x5): a case with a median under 10 us, measured that many") for line in out)
    # A run without repeats has no mark and no note.
    plain = versus_best.table([{"rows": [row("kernellab", 5.7, speedups={"liger": (0.9, 0.89, 0.91)}),
                                         row("liger", 5.5)]}])
    assert "(x" not in plain
