"""A whole CPU run over fake ops: the correctness gate, the results folder, plots, compare.

The run is timed on a fake clock (bench_fakes.FakeClock): every verdict here comes from samples
with a known spread, never from this machine's speed or load.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import struct
from pathlib import Path

import pytest

import bench_fakes
from kernellab import ROOT, bench
from kernellab.bench import compare, environment, results, runner
from kernellab.errors import BenchError


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("bench")
    mp = pytest.MonkeyPatch()
    mp.setenv("KERNELLAB_CACHE", str(tmp / "cache"))
    try:
        clock = bench_fakes.use_fake_clock(mp)
        doc, folder = runner.run(runner.Options(quick=True, out=tmp / "run"), catalog=bench_fakes.catalog(clock=clock),
                                 log=io.StringIO())
    finally:
        mp.undo()
    return doc, folder


def _rows(doc: dict, **match: str) -> list[dict]:
    return [r for r in doc["rows"] if all(r[k] == v for k, v in match.items())]


def test_every_implementation_is_checked_before_it_is_timed(run: tuple[dict, Path]) -> None:
    doc, _ = run
    ok = _rows(doc, op="vadd", impl="kernellab")[0]
    assert ok["status"] == "ok" and ok["stats"]["n"] >= 10 and len(ok["samples_ms"]) == ok["stats"]["n"]
    broken = _rows(doc, op="vadd", impl="broken")[0]
    assert broken["status"] == "wrong" and "does not match reference" in broken["reason"]
    assert "stats" not in broken and "samples_ms" not in broken
    assert _rows(doc, impl="raises")[0]["status"] == "error"
    assert "invalid configuration argument" in _rows(doc, impl="raises")[0]["reason"]
    assert _rows(doc, impl="mutates")[0]["reason"] == "input 0 was modified"


def test_gpu_ops_are_skipped_without_a_gpu_and_say_why(run: tuple[dict, Path]) -> None:
    doc, _ = run
    (row,) = _rows(doc, op="gpu_only")
    assert row["status"] == "skipped" and "no CUDA GPU" in row["reason"]


def test_candidates_get_a_speedup_with_an_interval_per_baseline(run: tuple[dict, Path]) -> None:
    doc, _ = run
    row = _rows(doc, op="vadd", impl="kernellab")[0]
    ratio = row["speedups"]["eager"]
    assert ratio["lo"] <= ratio["value"] <= ratio["hi"]
    assert ratio["value"] == pytest.approx(bench_fakes.FAKE_MS["eager"] / bench_fakes.FAKE_MS["kernellab"], rel=0.02)
    assert row["gbps"] == pytest.approx(3 * 4096 * 4 / (row["stats"]["median"] * 1e-3) / 1e9)
    assert row["pct_peak"] is None  # CPU timing has no measured roofline
    assert _rows(doc, op="vadd", impl="eager")[0]["role"] == "baseline"


def test_the_run_records_its_environment_and_timer(run: tuple[dict, Path]) -> None:
    doc, _ = run
    assert doc["timer"] == "cpu-perf-counter" and doc["quick"] is True
    env = doc["environment"]
    for key in ("python", "torch", "cuda_runtime", "triton", "nvcc", "image", "git", "gpu", "arch_flags"):
        assert key in env
    assert env["image"] == "native" and env["gpu"] is None
    assert any("CPU timing" in w for w in doc["warnings"])
    assert any("broken" in w and "wrong" in w for w in doc["warnings"])


def test_folder_holds_json_csv_summary_and_two_pngs(run: tuple[dict, Path]) -> None:
    doc, folder = run
    assert sorted(p.name for p in folder.iterdir()) == [
        "results.csv", "results.json", "roofline.png", "speedup.png", "summary.md"]
    assert json.loads((folder / "results.json").read_text())["rows"] == json.loads(json.dumps(doc["rows"]))
    for png in ("roofline.png", "speedup.png"):
        data = (folder / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        assert width > 300 and height > 200


def test_csv_has_one_line_per_row_and_speedup_columns(run: tuple[dict, Path]) -> None:
    doc, folder = run
    lines = list(csv.DictReader((folder / "results.csv").open()))
    assert len(lines) == len(doc["rows"])
    ok = next(line for line in lines if line["impl"] == "kernellab")
    assert float(ok["median_ms"]) > 0 and float(ok["speedup_vs_eager_lo"]) <= float(ok["speedup_vs_eager"])
    assert next(line for line in lines if line["impl"] == "broken")["median_ms"] == ""


def test_summary_is_a_markdown_table_with_reasons(run: tuple[dict, Path]) -> None:
    _, folder = run
    text = (folder / "summary.md").read_text()
    assert "| op | shape | dtype | impl | median | IQR | GB/s | TFLOP/s | % peak | vs eager | notes |" in text
    kernellab_line = next(line for line in text.splitlines() if "| kernellab |" in line)
    assert "x [" in kernellab_line  # speedup with its interval
    assert "wrong: does not match reference" in text
    assert "CPU timing" in text


def test_compare_with_itself_finds_no_regression(run: tuple[dict, Path]) -> None:
    doc, _ = run
    report = compare.compare(doc, doc)
    assert not report.regressions and not report.environment
    verdicts = {(r["impl"], r["verdict"]) for r in report.rows}
    assert ("kernellab", "same") in verdicts and ("broken", "not timed") in verdicts


def _slowed(doc: dict, impl: str, factor: float) -> dict:
    new = copy.deepcopy(doc)
    new["run"] = "slowed"
    for row in new["rows"]:
        if row["impl"] == impl and row["status"] == "ok":
            row["samples_ms"] = [x * factor for x in row["samples_ms"]]
            row["stats"] = __import__("kernellab.bench.stats", fromlist=["x"]).summarize(row["samples_ms"]).to_dict()
    return new


def test_a_doubled_time_is_a_regression_and_exits_non_zero(run: tuple[dict, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    doc, folder = run
    new = _slowed(doc, "kernellab", 2.0)
    new["environment"] = dict(doc["environment"], driver_changed=True, torch="9.9.9")
    report = compare.compare(doc, new)
    (slowed,) = report.regressions
    assert slowed["impl"] == "kernellab" and slowed["verdict"] == "slower"
    # The fake clock's 1% spread leaves the 3% floor as the bar, far below the doubling.
    assert slowed["change"] == pytest.approx(1.0, abs=0.02) and slowed["threshold"] == pytest.approx(0.03)
    assert "torch: " in " ".join(report.environment)
    (tmp_path / "new").mkdir()
    results.write(tmp_path / "new", new)
    code = bench.main(["--compare", str(folder), "--new", str(tmp_path / "new")])
    out = capsys.readouterr()
    assert code == 1
    assert "significant regression" in out.err and "environments differ" in out.err
    assert "| slower |" in out.out


def test_an_op_that_turned_wrong_is_a_regression(run: tuple[dict, Path]) -> None:
    doc, _ = run
    new = copy.deepcopy(doc)
    row = _rows(new, op="vadd", impl="kernellab")[0]
    row.update(status="wrong", reason="does not match reference")
    assert [r["verdict"] for r in compare.compare(doc, new).regressions] == ["now failing"]


def test_environment_differences_name_what_changed() -> None:
    old = {"gpu": {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-1", "driver": "535.1"}, "image": "native",
           "torch": "2.3.0"}
    new = {"gpu": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-2", "driver": "580.1"},
           "image": {"id": "sha256:ab", "lock_sha256": "cd"}, "torch": "2.3.0"}
    diffs = environment.differences(old, new)
    assert any(d.startswith("GPU: NVIDIA A100") for d in diffs)
    assert any(d.startswith("driver:") for d in diffs) and any(d.startswith("image: native -> cd") for d in diffs)
    assert not any(d.startswith("torch") for d in diffs)


def test_load_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="no results.json"):
        results.load(tmp_path / "missing")
    (tmp_path / "results.json").write_text('{"hello": 1}')
    with pytest.raises(BenchError, match="not a kernellab bench result"):
        results.load(tmp_path)


def test_an_op_that_fails_to_build_gets_rows_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    clock = bench_fakes.use_fake_clock(monkeypatch)
    specs = [bench_fakes.FakeSpec("bad", bench_shapes=[{"n": 64}]), bench_fakes.FakeSpec("good", bench_shapes=[{"n": 64}])]
    doc, _ = runner.run(runner.Options(quick=True, out=tmp_path / "r"),
                        catalog=bench_fakes.catalog(specs, {"kernellab": lambda x, y: x + y}, failing=("bad",),
                                                    clock=clock),
                        log=io.StringIO())
    bad = _rows(doc, op="bad")
    assert len(bad) == 1 and bad[0]["status"] == "error" and "load failed" in bad[0]["reason"]
    assert _rows(doc, op="good", impl="kernellab")[0]["status"] == "ok"


def test_no_matching_op_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="no op matches -k 'nothing'"):
        runner.run(runner.Options(select="nothing", out=tmp_path), catalog=bench_fakes.catalog(), log=io.StringIO())


def _big_run() -> dict:
    """A run whose raw samples (40 rows of 4000) are well past RAW_INLINE_BYTES as JSON."""
    rows = []
    for i in range(40):
        r = bench_fakes.row("softmax", "kernellab", 0.5 + i / 100, seed=i, shape={"n": 1024 * (i + 1)})
        r["samples_ms"] = bench_fakes.samples(0.5 + i / 100, 0.01, seed=i, n=4000)
        rows.append(r)
    rows.append(bench_fakes.row("softmax", "eager", None, status="error"))  # no samples at all
    doc = bench_fakes.run_doc("big", rows)
    doc["clock_samples"] = [[t / 10, 1980, 2619] for t in range(300)]
    return doc


def test_large_raw_samples_go_compressed_beside_results_json_and_load_back(tmp_path: Path) -> None:
    doc = _big_run()
    written = results.write(tmp_path, doc)
    assert tmp_path / results.RAW_FILE in written
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["raw"] == results.RAW_FILE and "clock_samples" not in on_disk
    assert not any("samples_ms" in r for r in on_disk["rows"]), "the samples are not kept twice"
    assert on_disk["rows"][0]["stats"] == doc["rows"][0]["stats"], "the summaries stay readable in results.json"
    folder_bytes = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert folder_bytes < len(json.dumps(doc)) / 2, (folder_bytes, len(json.dumps(doc)))
    loaded = results.load(tmp_path)
    assert loaded["rows"] == json.loads(json.dumps(doc["rows"])) and "raw" not in loaded
    assert loaded["clock_samples"] == doc["clock_samples"]
    assert "samples_ms" in doc["rows"][0], "writing leaves the caller's document whole"
    first = (tmp_path / results.RAW_FILE).read_bytes()
    results.write(tmp_path, doc)
    assert (tmp_path / results.RAW_FILE).read_bytes() == first, "the same samples give the same bytes"


def test_a_small_run_keeps_its_samples_inline_and_drops_a_stale_sidecar(tmp_path: Path) -> None:
    results.write(tmp_path, _big_run())
    small = bench_fakes.run_doc("small", [bench_fakes.row("softmax", "kernellab", 0.5)])
    results.write(tmp_path, small)
    assert not (tmp_path / results.RAW_FILE).exists()
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert "raw" not in on_disk and on_disk["rows"][0]["samples_ms"] == small["rows"][0]["samples_ms"]
    assert results.load(tmp_path)["rows"] == json.loads(json.dumps(small["rows"]))


def test_a_missing_or_mismatched_sidecar_is_one_sentence(tmp_path: Path) -> None:
    results.write(tmp_path, _big_run())
    raw = (tmp_path / results.RAW_FILE).read_bytes()
    (tmp_path / results.RAW_FILE).unlink()
    with pytest.raises(BenchError, match=r"keeps its raw samples in samples\.json\.gz, which is not beside it"):
        results.load(tmp_path)
    (tmp_path / results.RAW_FILE).write_bytes(raw[: len(raw) // 2])
    with pytest.raises(BenchError, match="is damaged"):
        results.load(tmp_path)
    doc = json.loads((tmp_path / "results.json").read_text())
    doc["rows"] = doc["rows"][:3]
    (tmp_path / "results.json").write_text(json.dumps(doc))
    (tmp_path / results.RAW_FILE).write_bytes(raw)
    with pytest.raises(BenchError, match="holds samples for 41 rows, not 3"):
        results.load(tmp_path)


def test_min_time_sets_the_measured_time_per_function_and_the_summary_says_so(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # --min-time 0.2 (as `invoke bench --min-time 0.2` passes it): every function measured for at least 0.2 s of the
    # fake clock's time unless its timeout (20x) ended it, the settings recorded, and the summary's Timing line true.
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    clock = bench_fakes.use_fake_clock(monkeypatch)
    doc, folder = runner.run(runner.Options(quick=True, out=tmp_path / "r", min_time_s=0.2),
                             catalog=bench_fakes.catalog(clock=clock), log=io.StringIO())
    assert doc["settings"]["min_time_s"] == 0.2 and doc["settings"]["timeout_s"] == 4.0
    timed = [r for r in doc["rows"] if r["status"] == "ok"]
    assert timed and all(sum(r["samples_ms"]) >= 200 or r["stop_reason"] == "timeout" for r in timed)
    summary = (folder / "summary.md").read_text()
    assert ">= 10 samples and >= 0.2 s" in summary and "or 4.0 s per function" in summary


def test_a_run_records_the_kernel_sources_of_each_op_it_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """results.json's `sources`: what the catalog says each op compiles (kernellab.ops.library.kernel_sources), read
    just before the op is built, and the summary's header names each op's digest; an op that fails to build has its
    sources recorded too (they are what failed)."""
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    clock = bench_fakes.use_fake_clock(monkeypatch)
    specs = [bench_fakes.FakeSpec("vadd"), bench_fakes.FakeSpec("bad")]
    catalog = bench_fakes.catalog(specs, {"kernellab": lambda x, y: x + y}, failing=("bad",), clock=clock)
    asked: list[str] = []

    def kernel_sources(spec: bench_fakes.FakeSpec) -> dict:
        asked.append(spec.name)
        return {"sha256": spec.name[0] * 64, "files": {f"{spec.name}/{spec.name}.cu": "1", "_common/row.cuh": "2"}}

    catalog.kernel_sources = kernel_sources
    doc, folder = runner.run(runner.Options(quick=True, out=tmp_path / "r"), catalog=catalog, log=io.StringIO())
    assert asked == ["vadd", "bad"]
    assert doc["sources"]["vadd"]["files"] == {"vadd/vadd.cu": "1", "_common/row.cuh": "2"}
    assert results.load(folder)["sources"] == doc["sources"]
    header = (folder / "summary.md").read_text()
    assert f"- Kernel sources (sha256 of the files each op compiles, listed in results.json): vadd {'v' * 12} " \
           f"(2 files), bad {'b' * 12} (2 files)" in header


def test_min_time_must_be_more_than_zero() -> None:
    assert bench.main(["--min-time", "0", "--out", "/nonexistent"]) == 2


def test_a_run_without_its_samples_file_loads_its_statistics_only_when_asked(tmp_path: Path) -> None:
    """--compare needs the raw samples and says so; a reader of medians and intervals (versus_best) can do without."""
    kept = tmp_path / "run"
    kept.mkdir()
    (kept / "results.json").write_text((ROOT / "results" / "h100-norms" / "results.json").read_text())
    with pytest.raises(BenchError, match=r"keeps its raw samples in samples.json.gz, which is not beside it"):
        results.load(kept)
    doc = results.load(kept, samples=False)
    assert len(doc["rows"]) == 360 and all("samples_ms" not in r for r in doc["rows"])
    assert doc["rows"][0]["stats"]["median"] > 0
