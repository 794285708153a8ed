"""`invoke bench`: the same arguments reach `python -m kernellab.bench`, wherever it runs."""
from __future__ import annotations

import pytest
from invoke import Exit

from kernellab import ROOT
from kernellab.cli import bench as task_module
from kernellab.places import in_workspace
from places_fixtures import RecordingPlace, context


def test_the_job_names_repository_paths_which_a_container_sees_under_workspace() -> None:
    place = RecordingPlace()
    task_module.bench.body(context(place), k="softmax", quick=True, compare=str(ROOT / "results" / "old"))
    job = place.job
    assert job.argv == ("python", "-m", "kernellab.bench", "-k", "softmax", "--quick", "--compare",
                        str(ROOT / "results" / "old"))
    assert job.with_paths(in_workspace)[-1] == "/workspace/results/old" and job.gpu


def test_a_bare_run_name_is_a_run_under_results(tmp_path, monkeypatch) -> None:
    (ROOT / "results" / "kl-test-bare-run").mkdir(parents=True, exist_ok=True)
    try:
        monkeypatch.chdir(tmp_path)
        place = RecordingPlace()
        task_module.bench.body(context(place), compare="kl-test-bare-run")
        assert place.job.with_paths(in_workspace)[-1] == "/workspace/results/kl-test-bare-run"
    finally:
        (ROOT / "results" / "kl-test-bare-run").rmdir()


def test_a_regression_is_a_non_zero_exit() -> None:
    with pytest.raises(Exit) as e:
        task_module.bench.body(context(RecordingPlace(code=1)))
    assert e.value.code == 1


def test_compare_and_out_are_refused_on_a_cluster() -> None:
    with pytest.raises(Exit, match="--compare and --out are for runs on this machine") as e:
        task_module.bench.body(context(RecordingPlace()), on="slurm", compare="old")
    assert e.value.code == 2


def test_min_time_reaches_the_bench_and_every_cluster_part() -> None:
    place = RecordingPlace()
    task_module.bench.body(context(place), k="softmax", min_time="0.1")
    assert place.job.argv == ("python", "-m", "kernellab.bench", "-k", "softmax", "--min-time", "0.1")
    from kernellab import jobs

    (part,) = jobs.bench("softmax and not triton", min_time=0.1).parts()
    assert part.argv[part.argv.index("--min-time") + 1] == "0.1"


@pytest.mark.parametrize("value", ["0", "-1", "fast", "inf", "nan"])
def test_a_min_time_that_is_not_a_positive_number_is_one_sentence(value: str) -> None:
    with pytest.raises(Exit, match=r"--min-time is seconds of measured time per function, a number more than 0") as e:
        task_module.bench.body(context(RecordingPlace()), min_time=value)
    assert e.value.code == 2
