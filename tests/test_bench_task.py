"""`invoke bench`: the same arguments reach `python -m kernellab.bench`, in a container or natively."""
from __future__ import annotations

from pathlib import Path

import pytest
from invoke import Config, Context, Exit

from kernellab import ROOT
from kernellab.cli import bench as task_module
from kernellab.cli import collection
from kernellab.errors import BenchError


def _ctx() -> Context:
    return Context(Config(overrides={"kernellab": {"target": "cu130-pip"}}))


def test_bench_is_listed_with_its_flags() -> None:
    task = collection()["bench"]
    assert {"target", "k", "native", "quick", "compare", "out"} <= {a.name for a in task.get_arguments()}


def test_in_a_container_paths_become_repository_relative(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr("kernellab.containers.run_in_target",
                        lambda target, argv, gpu=True: calls.append((target, argv, gpu)) or 0)
    task_module.bench.body(_ctx(), k="softmax", quick=True, compare=str(ROOT / "results" / "old"))
    target, argv, gpu = calls[0]
    assert target == "cu130-pip" and gpu is True
    assert argv == ["python", "-m", "kernellab.bench", "-k", "softmax", "--quick", "--compare", "results/old"]


def test_a_regression_in_the_container_is_a_non_zero_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kernellab.containers.run_in_target", lambda target, argv, gpu=True: 1)
    with pytest.raises(Exit) as e:
        task_module.bench.body(_ctx(), target="cpu")
    assert e.value.code == 1


def test_paths_outside_the_repository_are_refused(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    with pytest.raises(BenchError, match="outside the repository"):
        task_module._in_repo(str(tmp_path / "old"))


def test_native_runs_the_library_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr("kernellab.bench.main", lambda argv: seen.append(argv) or 0)
    task_module.bench.body(_ctx(), native=True, k="vector_add", out="/tmp/x")
    assert seen == [["-k", "vector_add", "--out", "/tmp/x"]]
