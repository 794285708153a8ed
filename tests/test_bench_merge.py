"""Merging a sweep across GPU types (results/<run>/<gpu-type>/<op>/), and --compare on merged runs.

Every result here is synthetic (bench_fakes.row): samples with a known spread, no live timing.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench_fakes import h100, row, run_doc
from kernellab import bench
from kernellab.bench import compare, merge, results, stats
from kernellab.errors import BenchError

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"n": 4096}
#: (kernellab ms, eager ms, % peak) per GPU type and op: h100 twice as fast as eager, a100 1.5x.
TIMES = {
    "h100": {"matmul": (1.0, 2.0, 80.5), "softmax": (0.050, 0.100, 71.3)},
    "a100": {"matmul": (2.0, 3.0, 62.0), "softmax": (0.080, 0.120, 55.0)},
}


def a100(uuid: str = "GPU-a100-1", host: str = "a100-node") -> dict[str, Any]:
    env = h100()
    env["host"] = host
    env["gpu"].update(name="NVIDIA A100-SXM4-80GB", uuid=uuid, compute_capability="8.0", sm_count=108,
                      driver="535.104.05")
    return env


def l40s() -> dict[str, Any]:
    env = h100()
    env["gpu"].update(name="NVIDIA L40S", uuid="GPU-l40s", compute_capability="8.9")
    return env


ENVS = {"h100": h100, "a100": a100, "l40s": l40s}


def op_doc(name: str, op: str, kernel_ms: float, eager_ms: float, pct: float, env: dict[str, Any],
           seed: int = 0) -> dict[str, Any]:
    """One task's run: the kernellab candidate (with its speedup and % peak) and the eager baseline."""
    kernel = row(op, "kernellab", kernel_ms, seed=seed, shape=SHAPE)
    eager = row(op, "eager", eager_ms, role="baseline", seed=seed + 1, shape=SHAPE)
    kernel["speedups"] = {"eager": stats.ratio_of_medians(eager["samples_ms"], kernel["samples_ms"]).to_dict()}
    kernel.update(pct_peak=pct, bound="memory")
    return run_doc(name, [kernel, eager], env)


def sweep(root: Path, name: str, times: dict[str, dict[str, tuple[float, float, float]]] = TIMES,
          seed: int = 0, envs: dict[str, dict[str, dict[str, Any]]] | None = None) -> Path:
    """A sweep's folder: one bench run per (GPU type, op), written as the Slurm tasks would."""
    run = root / name
    for gpu_type, ops in times.items():
        for op, (kernel_ms, eager_ms, pct) in ops.items():
            env = (envs or {}).get(gpu_type, {}).get(op) or ENVS[gpu_type]()
            results.write(run / gpu_type / op,
                          op_doc(f"{name}-{gpu_type}-{op}", op, kernel_ms, eager_ms, pct, env, seed))
    return run


def with_failed_task(root: Path, name: str, **kw: Any) -> Path:
    """A sweep where a100's matmul task failed: its folder holds only the Slurm log."""
    times = {"h100": TIMES["h100"], "a100": {"softmax": TIMES["a100"]["softmax"]}}
    run = sweep(root, name, times, **kw)
    (run / "a100" / "matmul").mkdir(parents=True)
    (run / "a100" / "matmul" / "slurm-123.out").write_text("CANCELLED AT ... DUE TO TIME LIMIT\n")
    return run


def table(summary: str) -> list[dict[str, str]]:
    """summary.md's table as one dict per row, keyed by the header's columns."""
    lines = [line for line in summary.splitlines() if line.startswith("| ")]
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(cols, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]


def test_each_gpu_type_becomes_one_run_that_load_and_compare_accept(tmp_path: Path) -> None:
    run = sweep(tmp_path, "sweep")
    merged = merge.merge_gpu_type(run / "h100")
    doc = results.load(run / "h100")
    assert [(r["op"], r["impl"]) for r in doc["rows"]] == [
        ("matmul", "kernellab"), ("matmul", "eager"), ("softmax", "kernellab"), ("softmax", "eager")]
    assert doc["run"] == "sweep/h100" and doc["gpu_type"] == "h100" and doc["missing"] == []
    assert [(p["op"], p["path"], p["rows"]) for p in doc["parts"]] == [
        ("matmul", "matmul/results.json", 2), ("softmax", "softmax/results.json", 2)]
    assert doc["environment"] == h100() and not doc["merge_warnings"]
    assert doc["rows"] == json.loads(json.dumps(merged["rows"]))
    summary = (run / "h100" / "summary.md").read_text()
    assert "- Merged from 2 runs, one per op: matmul (gpu-host), softmax (gpu-host)" in summary
    report = compare.compare(doc, doc)
    assert isinstance(report, compare.Report) and not report.regressions


def test_parts_on_different_gpus_are_warned_about_and_kept_apart_by_compare(tmp_path: Path) -> None:
    nodes = {"h100": {"matmul": h100(uuid="GPU-1"), "softmax": h100(uuid="GPU-2")}}
    old = merge.merge_gpu_type(sweep(tmp_path, "old", {"h100": TIMES["h100"]}, envs=nodes) / "h100")
    assert old["environment"]["gpu"]["uuid"] == "GPU-1 (matmul); GPU-2 (softmax)"
    assert "the parts ran with different GPU UUID: GPU-1 (matmul); GPU-2 (softmax)" in old["warnings"]
    # The same ops on the same GPUs compare in absolute time; swapped GPUs are another machine.
    same = merge.merge_gpu_type(sweep(tmp_path, "same", {"h100": TIMES["h100"]}, seed=5, envs=nodes) / "h100")
    assert not compare.machine_differences(old["environment"], same["environment"])
    swapped = {"h100": {"matmul": h100(uuid="GPU-2"), "softmax": h100(uuid="GPU-1")}}
    new = merge.merge_gpu_type(sweep(tmp_path, "new", {"h100": TIMES["h100"]}, seed=5, envs=swapped) / "h100")
    assert compare.compare_plain(old, new).relative


def test_a_row_two_parts_measured_is_kept_once_from_its_own_op(tmp_path: Path) -> None:
    run = tmp_path / "sweep"
    own = op_doc("own", "vector_add", 0.5, 1.0, 50.0, h100(), seed=1)
    # `-k add` matched vector_add too: the "add" task's rows of vector_add are the duplicates.
    results.write(run / "h100" / "add", run_doc("add", [*op_doc("a", "add", 0.5, 1.0, 50.0, h100())["rows"],
                                                       *op_doc("b", "vector_add", 0.6, 1.0, 40.0, h100())["rows"]]))
    results.write(run / "h100" / "vector_add", own)
    doc = merge.merge_gpu_type(run / "h100")
    vadd = [r for r in doc["rows"] if r["op"] == "vector_add"]
    assert vadd == json.loads(json.dumps(own["rows"]))
    assert any("2 rows measured by more than one part" in w for w in doc["warnings"])


def test_each_ops_kernel_sources_come_from_its_own_part(tmp_path: Path) -> None:
    """A task made with `-k` may compile another op too (its kernel code then as that task's checkout had it): the
    merged run's `sources` names each op's code as the task named after it recorded it, and its summary says so."""
    run = tmp_path / "sweep"
    beta = op_doc("beta", "beta", 0.5, 1.0, 50.0, h100())
    beta["sources"] = {"beta": {"sha256": "b" * 64, "files": {"beta/beta.cu": "1"}}}
    zeta = run_doc("zeta", [*op_doc("z", "zeta", 0.5, 1.0, 50.0, h100())["rows"]])
    zeta["sources"] = {"zeta": {"sha256": "c" * 64, "files": {"zeta/zeta.cu": "2"}},
                       "beta": {"sha256": "d" * 64, "files": {"beta/beta.cu": "3"}}}
    results.write(run / "h100" / "beta", beta)
    results.write(run / "h100" / "zeta", zeta)
    doc = merge.merge_gpu_type(run / "h100")
    assert {op: s["sha256"][0] for op, s in doc["sources"].items()} == {"beta": "b", "zeta": "c"}
    summary = (run / "h100" / "summary.md").read_text()
    assert f"beta {'b' * 12} (1 file), zeta {'c' * 12} (1 file)" in summary
    # beta's own part from before kernellab recorded sources: its rows are that part's, so no sources for beta.
    del beta["sources"]
    results.write(run / "h100" / "beta", beta)
    assert sorted(merge.merge_gpu_type(run / "h100")["sources"]) == ["zeta"]


def test_run_summary_has_a_column_group_per_gpu_type_with_that_types_figures(tmp_path: Path) -> None:
    run = sweep(tmp_path, "sweep")
    summary = merge.merge_run(run, ["h100", "a100"])
    text = summary.read_text()
    assert summary == run / "summary.md"
    assert "- h100: NVIDIA H100 80GB HBM3, driver 570.86.15, host gpu-host; torch 2.11.0" in text
    assert "- a100: NVIDIA A100-SXM4-80GB, driver 535.104.05, host a100-node; torch 2.11.0" in text
    lines = table(text)
    assert list(lines[0]) == ["op", "shape", "dtype", "impl", "h100 median", "h100 % peak", "h100 vs eager",
                              "a100 median", "a100 % peak", "a100 vs eager", "notes"]
    (line,) = [ln for ln in lines if ln["op"] == "softmax" and ln["impl"] == "kernellab"]
    for gpu_type, pct, speedup in (("h100", "71.3% memory", 2.0), ("a100", "55% memory", 1.5)):
        kernel = next(r for r in results.load(run / gpu_type)["rows"] if r["op"] == "softmax" and r["role"] == "candidate")
        assert line[f"{gpu_type} median"] == results.fmt_time(kernel["stats"]["median"])
        assert line[f"{gpu_type} % peak"] == pct
        assert line[f"{gpu_type} vs eager"] == f"{kernel['speedups']['eager']['value']:.2f}x"
        assert kernel["speedups"]["eager"]["value"] == pytest.approx(speedup, rel=0.02)
    (eager,) = [ln for ln in lines if ln["op"] == "softmax" and ln["impl"] == "eager (baseline)"]
    assert eager["a100 median"].endswith(" us") and eager["a100 vs eager"] == ""
    assert "Every task left results." in text


def test_missing_tasks_are_listed_and_shown_where_figures_would_be(tmp_path: Path) -> None:
    run = with_failed_task(tmp_path, "sweep")
    merge.merge_run(run, ["h100", "a100", "l40s"], missing={"l40s": ["matmul", "softmax"]})
    text = (run / "summary.md").read_text()
    assert "- l40s: no results" in text
    missing = text.split("## Missing")[1]
    assert "- a100/matmul: a100/matmul/ has no results.json: the task failed or timed out" in missing
    assert "- l40s/matmul: the task produced no results" in missing
    assert "- l40s/softmax: the task produced no results" in missing
    (line,) = [ln for ln in table(text) if ln["op"] == "matmul" and ln["impl"] == "kernellab"]
    assert line["a100 median"] == "missing task" and line["a100 vs eager"] == ""
    assert line["h100 vs eager"].endswith("x")
    assert "l40s median" not in line  # a type with no results gets no columns, only its missing tasks
    manifest = json.loads((run / "merged.json").read_text())
    assert manifest["gpu_types"] == {"h100": "h100/results.json", "a100": "a100/results.json"}
    assert [g["op"] for g in manifest["missing"]["a100"]] == ["matmul"]
    assert [g["op"] for g in manifest["missing"]["l40s"]] == ["matmul", "softmax"]
    assert "h100" not in manifest["missing"]


def test_an_op_skipped_on_one_type_says_so_in_that_types_cells(tmp_path: Path) -> None:
    run = sweep(tmp_path, "sweep", {"h100": {"softmax": TIMES["h100"]["softmax"]}})
    skipped = {"op": "softmax", "kind": "cuda", "shape": SHAPE, "dtype": "float16", "impl": "all", "role": "-",
               "status": "skipped", "reason": "no CUDA GPU visible to PyTorch"}
    cpu = run_doc("cpu-softmax", [skipped], h100())
    cpu["environment"]["gpu"], cpu["timer"] = None, "cpu-perf-counter"
    results.write(run / "cpu" / "softmax", cpu)
    text = merge.merge_run(run, ["h100", "cpu"]).read_text()
    assert "- cpu: no GPU (CPU timing, not comparable with GPU figures), host gpu-host" in text
    lines = table(text)
    assert [ln["impl"] for ln in lines] == ["kernellab", "eager (baseline)"]  # no separate "all" row
    assert all(ln["cpu median"] == "skipped" for ln in lines)
    assert "cpu: skipped: no CUDA GPU visible to PyTorch" in lines[0]["notes"]


def test_merged_json_names_each_types_run_and_results_load_reads_it_back(tmp_path: Path) -> None:
    run = with_failed_task(tmp_path, "sweep")
    merge.merge_run(run, ["h100", "a100"])
    manifest = json.loads((run / "merged.json").read_text())
    assert {k: manifest[k] for k in ("schema", "kind", "run", "summary")} == {
        "schema": 1, "kind": "merged", "run": "sweep", "summary": "summary.md"}
    loaded = results.load(run)
    assert results.is_merged(loaded) and list(loaded["gpu_types"]) == ["h100", "a100"]
    assert len(loaded["gpu_types"]["h100"]["rows"]) == 4 and len(loaded["gpu_types"]["a100"]["rows"]) == 2
    assert results.load(run / "merged.json")["gpu_types"].keys() == loaded["gpu_types"].keys()


def test_the_cross_gpu_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: `pip install matplotlib` to test plots")
    run = with_failed_task(tmp_path, "sweep")
    merge.merge_run(run, ["h100", "a100"])
    data = (run / "cross_gpu.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 300 and height > 200
    assert json.loads((run / "merged.json").read_text())["plot"] == "cross_gpu.png"
    assert "![speedup per GPU type](cross_gpu.png)" in (run / "summary.md").read_text()
    assert results.load(run / "a100")["missing"][0]["op"] == "matmul"  # the plot says "missing task" from it
    assert (run / "h100" / "speedup.png").is_file()


def test_two_merged_runs_are_compared_per_gpu_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = sweep(tmp_path, "old")
    slower = {"h100": TIMES["h100"], "a100": {**TIMES["a100"], "softmax": (0.120, 0.120, 37.0)},
              "l40s": {"softmax": (0.06, 0.1, 60.0)}}
    new = sweep(tmp_path, "new", slower, seed=7)
    for run, types in ((old, ["h100", "a100"]), (new, ["h100", "a100", "l40s"])):
        merge.merge_run(run, types)
    report = compare.compare(results.load(old), results.load(new))
    assert isinstance(report, compare.MergedReport)
    assert [t for t, _ in report.sections] == ["h100", "a100"]
    (regression,) = report.regressions
    assert (regression["gpu_type"], regression["op"], regression["impl"], regression["verdict"]) == (
        "a100", "softmax", "kernellab", "slower")
    assert report.notes == ["l40s: only in new, not compared."]
    # A task that failed in the new sweep is said once, not only shown as `gone` rows.
    failed = merge.merge_run(with_failed_task(tmp_path, "failed"), ["h100", "a100"]).parent
    notes = compare.compare(results.load(old), results.load(failed)).notes
    assert notes == ["a100/matmul: no results in failed (a100/matmul/ has no results.json: the task failed or "
                     "timed out)."]
    code = bench.main(["--compare", str(old), "--new", str(new)])
    out = capsys.readouterr()
    assert code == 1 and "1 significant regression(s) against old" in out.err
    assert "1 significant regression over all GPU types (h100 0, a100 1)." in out.out
    assert "## a100: old/a100 -> new/a100" in out.out and "- l40s: only in new, not compared." in out.out


def test_a_plain_run_is_compared_with_the_type_that_ran_on_its_gpu(tmp_path: Path) -> None:
    run = sweep(tmp_path, "sweep")
    merge.merge_run(run, ["h100", "a100"])
    plain = run_doc("plain-a100", op_doc("p", "softmax", 0.080, 0.120, 55.0, a100(), seed=3)["rows"], a100())
    results.write(tmp_path / "plain", plain)
    for old, new in ((run, tmp_path / "plain"), (tmp_path / "plain", run)):
        report = compare.compare(results.load(old), results.load(new))
        assert isinstance(report, compare.MergedReport)
        assert [t for t, _ in report.sections] == ["a100"] and not report.regressions
        assert "ran on NVIDIA A100-SXM4-80GB: compared with sweep's a100 only." in report.notes[0]
        matmul = "gone" if old == run else "new"  # matmul is only in the sweep
        assert {(r["op"], r["verdict"]) for r in report.sections[0][1].rows} == {
            ("softmax", "same"), ("matmul", matmul)}


def test_a_plain_run_on_a_gpu_the_merged_run_lacks_is_one_sentence(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = sweep(tmp_path, "sweep")
    merge.merge_run(run, ["h100", "a100"])
    results.write(tmp_path / "plain", run_doc("plain-l40s", op_doc("p", "softmax", 0.06, 0.1, 60.0, l40s())["rows"],
                                              l40s()))
    with pytest.raises(BenchError) as e:
        compare.compare(results.load(run), results.load(tmp_path / "plain"))
    assert str(e.value) == (
        "plain-l40s ran on NVIDIA L40S, which no GPU type of the merged run sweep ran on (h100 on NVIDIA H100 80GB "
        "HBM3, a100 on NVIDIA A100-SXM4-80GB); compare it with a run on the same GPU, or give one type's folder "
        "(sweep/<gpu-type>) to compare with.")
    assert bench.main(["--compare", str(run), "--new", str(tmp_path / "plain")]) == 1
    assert capsys.readouterr().err.startswith("kernellab: plain-l40s ran on NVIDIA L40S")


def test_python_m_kernellab_bench_merge_finds_the_gpu_types_itself(tmp_path: Path) -> None:
    run = with_failed_task(tmp_path, "sweep")
    (run / "logs").mkdir()  # not a GPU type: it holds no <op>/results.json
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-m", "kernellab.bench", "merge", str(run)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "# kernellab bench: sweep across GPU types" in done.stdout and f"merged into {run}" in done.stdout
    assert list(json.loads((run / "merged.json").read_text())["gpu_types"]) == ["a100", "h100"]


def test_merge_of_a_folder_without_results_says_what_it_looked_for(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty" / "h100" / "softmax").mkdir(parents=True)
    assert merge.main([str(tmp_path / "empty"), "--gpu-types", "h100"]) == 1
    assert "no <gpu-type>/<op>/results.json; nothing to merge." in capsys.readouterr().err
    with pytest.raises(BenchError, match="1 op folders without one"):
        merge.merge_gpu_type(tmp_path / "empty" / "h100")
