"""A recipe run's record survives anything: claim judging over any metric value (properties, hypothesis), two runs
started in the same second, a failed case's reason in full in every table, a record whose writing fails. No engine."""
from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernellab.provenance import Machine
from kernellab.recipes import claims, model, read, record
from kernellab.recipes.experiments import Case, Checked, Repeat, short_problem
from kernellab.recipes.manifest import Manifest
from recipe_fixtures import write_recipe

#: Every kind of number a metric regex can hand over (float() of what matched): 0, negative, tiny, huge, inf, NaN.
ANY_NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6).map(float),
                       st.just(0.0), st.just(-0.0))

ABSOLUTE = '''
[[claims]]
name = "n10 time on A100"
experiment = "fastop"
case = {{ n = 10 }}
judge = "absolute"
value = 20
unit = "ms"
gpu = "A100"
where = "table 1"
tolerance = {tolerance}

[[claims]]
name = "n10 bandwidth"
experiment = "fastop"
metric = "gbs"
case = {{ n = 10 }}
value = 500
unit = "GB/s"
baseline = "baseline"
baseline_value = 100
gpu = "A100"
where = "table 2"
tolerance = {tolerance}
'''

ONE_RUN = Repeat(1, 0, 0.1, "raw/x-r1.txt", {})


def _recipe(folder: Path, tolerance: float = 0.1) -> model.Recipe:
    folder = write_recipe(folder, {"paper": "a" * 40, "helper": "b" * 40}, extra=ABSOLUTE.format(tolerance=tolerance))
    text = (folder / "recipe.toml").read_text()
    # a second, higher-is-better metric in both experiments (the regex is never run here)
    more = '{ name = "gbs", regex = \'bw: ([0-9.]+)\', unit = "GB/s", better = "higher" }'
    text = text.replace('''metrics = [{ name = "time_ms", regex = 'time: ([0-9.]+) ms', unit = "ms" }]''',
                        f'''metrics = [{{ name = "time_ms", regex = 'time: ([0-9.]+) ms', unit = "ms" }}, {more}]''')
    (folder / "recipe.toml").write_text(text)
    return read.load(str(folder))


def _case(exp: str, time_ms: float, gbs: float, sane: bool = True) -> Case:
    return Case(exp, {"n": 10}, metrics={"time_ms": time_ms, "gbs": gbs},
                sanity=[Checked("max_diff", 0.001, "<= 0.01", sane)], runs=[ONE_RUN])


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> model.Recipe:
    return _recipe(tmp_path_factory.mktemp("r") / "fastop")


@settings(max_examples=200, deadline=None)
@given(own_ms=ANY_NUMBER, base_ms=ANY_NUMBER, own_gbs=ANY_NUMBER, base_gbs=ANY_NUMBER, sane=st.booleans(),
       gpu=st.sampled_from([None, "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]))
def test_every_claim_gets_a_verdict_with_a_reason_for_any_metric_value(recipe, own_ms, base_ms, own_gbs, base_gbs,
                                                                        sane, gpu):
    cases = [_case("fastop", own_ms, own_gbs, sane), _case("baseline", base_ms, base_gbs)]
    verdicts = claims.judge(recipe, cases, gpu_name=gpu)
    assert [v.claim for v in verdicts] == [c.name for c in recipe.claims]
    for v in verdicts:
        assert v.verdict in claims.VERDICTS and v.why
        if v.verdict in (claims.REPRODUCED, claims.WITHIN):
            assert v.measured is not None and math.isfinite(v.measured) and v.measured > 0
    usable = all(math.isfinite(x) and x > 0 for x in (own_ms, base_ms))
    by_name = {v.claim: v for v in verdicts}
    if not usable:
        assert by_name["n10 speedup"].verdict == claims.NOT_JUDGED
        assert "a verdict needs a positive finite number" in by_name["n10 speedup"].why


def _run(recipe, cases, verdicts) -> record.Run:
    return record.new(recipe, manifest=Manifest("fastop", "1" * 64, "cpu", "sha256:" + "2" * 64, {}, [], {}), image_id="sha256:" + "0" * 64,
                      machine=Machine(None), cases=cases, verdicts=verdicts)


@settings(max_examples=25, deadline=None)
@given(own_ms=ANY_NUMBER, base_ms=ANY_NUMBER)
def test_a_record_is_written_and_read_back_whatever_the_metrics_read(tmp_path_factory, recipe, own_ms, base_ms):
    """A metric of 0 once raised ZeroDivisionError in judging, and the run kept only raw/."""
    folder = tmp_path_factory.mktemp("run")
    cases = [_case("fastop", own_ms, 1.0), _case("baseline", base_ms, 1.0)]
    verdicts = claims.judge(recipe, cases, gpu_name=None)
    record.write(folder, _run(recipe, cases, verdicts))
    back = record.load(folder)
    assert len(back.cases) == 2 and len(back.claims) == len(recipe.claims)
    assert (folder / "summary.md").is_file() and (folder / "metrics.csv").is_file()


@pytest.mark.parametrize("value, tolerance, verdict", [
    (2.3, 0.2, "reproduced"), (1.7, 0.2, "within tolerance"), (1.5, 0.2, "not reproduced"),
])
def test_tolerance_is_one_sided_and_relative_to_the_claim_as_the_docs_say(tmp_path, value, tolerance, verdict):
    """docs/recipes.md's example: a 2.0x claim with tolerance 0.2 (the bandwidth claim here is 5x: scaled by 2.5)."""
    r = _recipe(tmp_path / "fastop", tolerance)
    cases = [_case("fastop", 20, 2.5 * value), _case("baseline", 100, 1.0)]   # bandwidth ratio = 2.5 * value
    bandwidth = next(v for v in claims.judge(r, cases, gpu_name=None) if v.claim == "n10 bandwidth")
    assert bandwidth.verdict == verdict and round(bandwidth.measured / 2.5, 6) == value


def test_two_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda fmt: "20261125-120000")
    got: list[Path] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            got.append(record.run_folder("demo", "NVIDIA H100 80GB HBM3", tmp_path))
        except BaseException as e:  # noqa: BLE001  (collected and asserted below)
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(got)) == 8
    assert sorted(p.name for p in got)[:2] == ["20261125-120000-h100", "20261125-120000-h100-2"]


def test_a_failed_cases_reason_is_whole_in_every_table(tmp_path, recipe):
    problem = "fastop {'n': 10} exited with code 127; last lines:\nstarting\n./bench.sh: line 3: fastbin: command not found"
    assert short_problem(problem) == ("fastop {'n': 10} exited with code 127 (last line: ./bench.sh: line 3: fastbin: "
                                      "command not found)")
    failed = Case("fastop", {"n": 10}, problem=problem, runs=[ONE_RUN])
    cases = [failed, _case("baseline", 100, 1.0)]
    verdicts = claims.judge(recipe, cases, gpu_name=None)
    record.write(tmp_path, _run(recipe, cases, verdicts))
    claims_md, summary = (tmp_path / "claims.md").read_text(), (tmp_path / "summary.md").read_text()
    for text in (claims_md, summary):
        assert "fastbin: command not found" in text and "last lines:" not in text
    row = next(line for line in summary.splitlines() if line.startswith("| fastop | n=10 |"))
    assert row.startswith("| fastop | n=10 | - | ") and row.endswith("fastbin: command not found) |"), row


def test_a_record_whose_writing_fails_still_keeps_the_cases_that_ran(tmp_path):
    cases = [_case("fastop", 20, 1.0)]
    record.salvage(tmp_path, recipe="fastop", cases=cases, why="writing the record failed (engine gone)")
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["incomplete"].startswith("writing the record failed") and len(data["cases"]) == 1
    assert "**This record is incomplete**" in (tmp_path / "summary.md").read_text()
    back = record.load(tmp_path)
    assert back.cases[0].metrics["time_ms"] == 20 and not back.finished


def test_every_committed_record_reads_back_as_the_one_record_type_unchanged():
    """results/recipes/*/*/run.json as compare and export read them: whole, and written back the same."""
    from kernellab import ROOT

    found = sorted((ROOT / "results" / "recipes").glob("*/*/run.json"))
    assert found, "no committed recipe record"
    for path in found:
        run = record.load(path.parent)
        assert run.cases and run.claims and run.finished, path
        data = json.loads(path.read_text())
        again = run.to_dict()
        assert {k: again[k] for k in data} == data, path   # nothing lost in the typed record
