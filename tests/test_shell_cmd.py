"""`invoke shell --cmd`: the command line reaches the container whole, for bash to run.

Argument building only: containers.run and the image lookup are replaced (a real container runs
the same command lines in the docker tests).
"""
from __future__ import annotations

from typing import Any

import pytest
from invoke import Config, Context, Exit

from kernellab import containers, images
from kernellab.cli import containers as task_module


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(images, "image_for_target", lambda target=None, *a, **kw: f"kernellab:{target or 'cpu'}")

    def run(image: str, command: Any = (), **kwargs: Any) -> int:
        calls.append({"image": image, "argv": list(command), **kwargs})
        return 0

    monkeypatch.setattr(containers, "run", run)
    return calls


def _ctx() -> Context:
    return Context(Config(overrides={"kernellab": {"target": "cpu"}}))


@pytest.mark.parametrize("cmd", [
    "cd build && make",
    "make -C build 2>&1 | tail -n 3; echo \"exit: $?\"",
    "for f in *.cu; do nvcc --version; done",
    "echo it's fine  # a comment with an apostrophe",
])
def test_cmd_reaches_the_container_as_one_bash_command_line(runs: list[dict[str, Any]], cmd: str) -> None:
    task_module.shell.body(_ctx(), cmd=cmd)
    (call,) = runs
    assert call["image"] == "kernellab:cpu"
    # bash -c, not -lc: a login shell reads Debian's /etc/profile, which resets the image's PATH.
    assert call["argv"] == ["bash", "-c", cmd]
    assert call["interactive"] is False


def test_without_cmd_it_is_an_interactive_bash(runs: list[dict[str, Any]]) -> None:
    task_module.shell.body(_ctx(), target="cu130-pip", gpu_mode="none")
    (call,) = runs
    assert call["image"] == "kernellab:cu130-pip"
    assert call["argv"] == ["bash"] and call["interactive"] is True and call["gpu"] is False


def test_the_commands_exit_code_is_the_tasks(monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]]) -> None:
    monkeypatch.setattr(containers, "run", lambda image, command=(), **kwargs: 2)
    with pytest.raises(Exit) as e:
        task_module.shell.body(_ctx(), cmd="cd build && make")
    assert e.value.code == 2


def test_an_empty_cmd_is_refused_in_one_sentence(runs: list[dict[str, Any]]) -> None:
    with pytest.raises(Exit, match="--cmd is empty") as e:
        task_module.shell.body(_ctx(), cmd="  ")
    assert e.value.code == 1 and not runs
