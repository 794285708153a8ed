"""Tasks: shell, test."""
from __future__ import annotations

from typing import Any

from .. import jobs
from ..errors import UsageError
from ..places import Flags
from . import run_job, task


@task(place=True, help={"cmd": "a command to run instead of an interactive shell"})
def shell(c: Any, cmd: str | None = None, *, where: Flags) -> None:
    """Open a shell (or run --cmd) in a target's container: repo at /workspace, your UID, the GPU."""
    if cmd is not None and not cmd.strip():
        raise UsageError("--cmd is empty; give a command line, or leave --cmd out for an interactive shell.")
    run_job(c, jobs.shell(cmd), where)


@task(place=True, help={"k": "only ops/tests matching EXPR (pytest -k: words, and, or, not)",
                        "suite": "what to run: kernels (default) or all (the whole tests/)"})
def test(c: Any, k: str | None = None, suite: str = "kernels", *, where: Flags) -> None:
    """Compile the kernels and check them against PyTorch, in the target's container (or --native, or --on slurm)."""
    run_job(c, jobs.test(k, suite=suite), where)
