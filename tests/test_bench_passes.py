"""The bench of an op with a backward: forward, backward and full rows, each checked before it is timed, speedups
within a pass, per-pass bytes; the tables, CSV and --compare keyed by pass; the timing loop's untimed setups.

Timings are synthetic (a scripted timing.measure, or the fake clock): nothing depends on this machine's speed.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import bench_fakes
from kernellab.bench import compare, results, runner, timing

torch = pytest.importorskip("torch")
from test_ops_backward import toy_module, toy_spec  # noqa: E402

#: Scripted medians (ms) per pass and implementation.
TIMES = {"forward": {"kernellab": 1.0, "plain": 1.0, "eager": 2.0, "detached": 2.0},
         "backward": {"kernellab": 2.0, "eager": 8.0},
         "full": {"kernellab": 3.0, "eager": 10.0}}
SHAPE = {"rows": 64, "cols": 128}


@pytest.fixture
def rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], list[tuple]]:
    """The rows of one bench case of the toy op (tests/test_ops_backward.py), timed by a scripted measure."""
    spec = toy_spec(tmp_path)
    module = toy_module(spec)
    module.baselines["detached"] = lambda x, w: (x * w).detach()  # an adapter without a backward
    calls: list[tuple] = []
    passes = iter(spec.passes)

    def measure(fns: dict, settings: Any, *, device: str, setups: dict | None = None) -> dict:
        which = next(passes)
        calls.append((which, sorted(fns), sorted(setups or {})))
        out = {}
        for i, (name, fn) in enumerate(fns.items()):
            (setups or {}).get(name, lambda: None)()
            fn()  # each prepared call really runs once
            out[name] = timing.Measurement(name, "cpu-perf-counter", 0.0, stop_reason="converged",
                                           samples_ms=bench_fakes.samples(TIMES[which][name], seed=i))
        return out

    monkeypatch.setattr(timing, "measure", measure)
    ctx = runner.Context("cpu", timing.QUICK, True, None, bench_fakes.SimpleNamespace(window=lambda *a: []), None)
    return runner.bench_case(spec, module, SHAPE, "float32", ctx), calls


def _row(rows: list[dict[str, Any]], impl: str, which: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["impl"] == impl and r["pass"] == which]
    return row


def test_every_pass_gets_a_row_per_implementation(rows: tuple) -> None:
    out, calls = rows
    assert [(r["pass"], r["impl"]) for r in out] == [
        (w, i) for w in ("forward", "backward", "full") for i in ("kernellab", "plain", "eager", "detached")]
    # Each pass is timed on its own; only the backward has an untimed setup (the forward whose graph it consumes).
    assert calls == [("forward", ["detached", "eager", "kernellab", "plain"], []),
                     ("backward", ["eager", "kernellab"], ["eager", "kernellab"]),
                     ("full", ["eager", "kernellab"], [])]


def test_implementations_without_a_backward_are_skipped_and_say_why(rows: tuple) -> None:
    out, _ = rows
    for which in ("backward", "full"):
        plain, detached = _row(out, "plain", which), _row(out, "detached", which)
        assert plain["status"] == "skipped" and "[backward] candidates do not name it" in plain["reason"]
        assert detached["status"] == "skipped" and "no autograd graph" in detached["reason"]


def test_speedups_and_bytes_are_per_pass(rows: tuple) -> None:
    out, _ = rows
    for which, factor in (("forward", 2.0), ("backward", 4.0), ("full", 10.0 / 3.0)):
        row = _row(out, "kernellab", which)
        assert row["status"] == "ok"
        assert row["speedups"]["eager"]["value"] == pytest.approx(factor, rel=0.02)
    fwd, bwd = (2 * 64 * 128 + 128) * 4, (3 * 64 * 128 + 2 * 128) * 4
    assert [_row(out, "kernellab", w)["bytes"] for w in ("forward", "backward", "full")] == [fwd, bwd, fwd + bwd]
    assert _row(out, "eager", "full")["gbps"] == pytest.approx((fwd + bwd) / 10.0e-3 / 1e9, rel=0.02)


def test_a_wrong_gradient_is_refused_before_it_is_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(grad_out: Any, x: Any, weight: Any, out: Any, grad_x: Any, grad_weight: Any) -> None:
        grad_x.copy_(grad_out * weight)
        grad_weight.copy_((grad_out * x).sum(0) * 1.01)

    spec = toy_spec(tmp_path)
    timed: list[list[str]] = []
    monkeypatch.setattr(timing, "measure", lambda fns, *a, **k: timed.append(sorted(fns)) or {})
    ctx = runner.Context("cpu", timing.QUICK, True, None, bench_fakes.SimpleNamespace(window=lambda *a: []), None)
    out = runner.bench_case(spec, toy_module(spec, wrong), SHAPE, "float32", ctx)
    for which in ("backward", "full"):
        row = _row(out, "kernellab", which)
        assert row["status"] == "wrong" and row["reason"].startswith("gradient of weight does not match")
    assert timed[1:] == [["eager"], ["eager"]]  # the wrong candidate's backward and full were never timed


def test_tables_csv_and_compare_keep_the_pass(rows: tuple) -> None:
    out, _ = rows
    doc = bench_fakes.run_doc("new", out)
    table = results.to_markdown(doc)
    assert "| impl | pass | median |" in table
    assert "| toy | rows=64 cols=128 | float32 | kernellab | backward | 1.999 ms |" in table
    csv_lines = results.to_csv(doc).splitlines()
    assert csv_lines[0].startswith("op,shape,dtype,impl,pass,role,")
    assert any(line.startswith("toy,rows=64 cols=128,float32,eager,full,baseline,ok,") for line in csv_lines)
    # A forward-only run keeps its table as it was.
    assert "| pass |" not in results.to_markdown(bench_fakes.run_doc("old", [r for r in out if r["pass"] == "forward"]))
    report = compare.compare(doc, doc)
    assert {(r["pass"], r["impl"]) for r in report.rows} >= {("backward", "kernellab"), ("full", "eager")}
    assert all(r["verdict"] in ("same", "not timed") for r in report.rows)


def test_an_old_run_without_passes_compares_with_the_forward_rows(rows: tuple) -> None:
    out, _ = rows
    old = [{k: v for k, v in r.items() if k != "pass"} for r in out if r["pass"] == "forward"]
    report = compare.compare(bench_fakes.run_doc("old", old), bench_fakes.run_doc("new", out))
    verdicts = {(r["pass"], r["impl"]): r["verdict"] for r in report.rows}
    assert verdicts[("forward", "kernellab")] == "same"
    assert verdicts[("backward", "kernellab")] == "new"
    text = compare.to_markdown(report)
    assert "| kernellab backward |" in text


def test_a_setup_runs_before_every_call_and_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = bench_fakes.use_fake_clock(monkeypatch)
    order: list[str] = []
    setup = bench_fakes.takes(clock, lambda: 5.0, calls=order, name="setup")
    call = bench_fakes.takes(clock, lambda: 1.0, calls=order, name="call")
    settings = timing.Settings(min_samples=10, min_time_s=0.02, timeout_s=2.0, round_s=0.01)
    m = timing.measure({"bwd": call}, settings, device="cpu", setups={"bwd": setup})["bwd"]
    assert m.median_ms == pytest.approx(1.0)
    assert order[:6] == ["setup", "call"] * 3 and order.count("setup") == order.count("call")


def test_a_tiny_case_is_judged_over_its_measurements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under 10 us a pass is measured tiny_repeats times; each measurement's ratio counts, the interval spans them."""
    spec = toy_spec(tmp_path)
    factors = iter([1.0, 1.25, 0.8] * 3)  # the candidate's time in each measurement, of 2 us; baselines take 4 us
    settings: list[Any] = []

    def measure(fns: dict, s: Any, *, device: str, setups: dict | None = None) -> dict:
        settings.append(s)
        f = next(factors)
        return {name: timing.Measurement(name, "cpu-perf-counter", 0.0, stop_reason="converged", samples_ms=bench_fakes.samples(
            0.004 if name in ("eager", "detached") else 0.002 * f, seed=i)) for i, name in enumerate(fns)}

    monkeypatch.setattr(timing, "measure", measure)
    ctx = runner.Context("cpu", replace(timing.QUICK, tiny_repeats=3), True, None,
                         bench_fakes.SimpleNamespace(window=lambda *a: []), None)
    out = runner.bench_case(spec, toy_module(spec), SHAPE, "float32", ctx)
    assert len(settings) == 9  # three passes, three measurements each
    assert [s.min_time_s for s in settings[:3]] == pytest.approx([timing.QUICK.min_time_s] + [timing.QUICK.min_time_s / 3] * 2)
    row = _row(out, "kernellab", "forward")
    assert row["repeat_medians_ms"] == pytest.approx([0.002, 0.0025, 0.0016], rel=0.02)
    assert row["stats"]["median"] == pytest.approx(0.002, rel=0.02)  # the first measurement's full figures
    eager = row["speedups"]["eager"]
    assert eager["repeats"] == pytest.approx([2.0, 1.6, 2.5], rel=0.02)
    assert eager["value"] == pytest.approx(2.0, rel=0.02) and eager["lo"] < 1.6 < 2.5 < eager["hi"]
    doc = bench_fakes.run_doc("new", out)
    table = results.to_markdown(doc)
    assert "were measured 3 times, each its own interleaved measurement" in table
    assert "3 measurements: medians 1.6" in table
