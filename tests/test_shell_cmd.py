"""`invoke shell --cmd`: the command line reaches the place whole, for bash to run.

Argument building only: a recording place stands for the container (a real container runs the
same command lines in the docker tests).
"""
from __future__ import annotations

import pytest
from invoke import Exit

from kernellab.cli import containers as task_module
from places_fixtures import RecordingPlace, context


@pytest.mark.parametrize("cmd", [
    "cd build && make",
    "make -C build 2>&1 | tail -n 3; echo \"exit: $?\"",
    "for f in *.cu; do nvcc --version; done",
    "echo it's fine  # a comment with an apostrophe",
])
def test_cmd_reaches_the_container_as_one_bash_command_line(cmd: str) -> None:
    place = RecordingPlace()
    task_module.shell.body(context(place), cmd=cmd)
    # bash -c, not -lc: a login shell reads Debian's /etc/profile, which resets the image's PATH.
    assert place.job.argv == ("bash", "-c", cmd) and place.job.interactive is False


def test_without_cmd_it_is_an_interactive_bash() -> None:
    place = RecordingPlace()
    task_module.shell.body(context(place))
    assert place.job.argv == ("bash",) and place.job.interactive is True


def test_the_commands_exit_code_is_the_tasks() -> None:
    with pytest.raises(Exit) as e:
        task_module.shell.body(context(RecordingPlace(code=2)), cmd="cd build && make")
    assert e.value.code == 2


def test_an_empty_cmd_is_refused_in_one_sentence() -> None:
    place = RecordingPlace()
    with pytest.raises(Exit, match="--cmd is empty") as e:
        task_module.shell.body(context(place), cmd="  ")
    assert e.value.code == 2 and not place.jobs
