"""Tasks: shell, test."""
from __future__ import annotations

from typing import Any

from .. import jobs
from ..errors import UsageError
from ..places import PLACE_HELP
from . import run_job, task


@task(help={**PLACE_HELP, "cmd": "a command to run instead of an interactive shell"})
def shell(c: Any, cmd: str | None = None, native: bool = False, target: str | None = None, image: str | None = None,
          engine: str | None = None, gpu_mode: str | None = None, gpu_index: str | None = None, on: str | None = None,
          gpus: str | None = None, profile: str | None = None, resume: str | None = None, dry_run: bool = False) -> None:
    """Open a shell (or run --cmd) in a target's container: repo at /workspace, your UID, the GPU."""
    if cmd is not None and not cmd.strip():
        raise UsageError("--cmd is empty; give a command line, or leave --cmd out for an interactive shell.")
    run_job(c, jobs.shell(cmd), locals())


@task(help={**PLACE_HELP, "k": "only ops/tests matching EXPR (pytest -k: words, and, or, not)",
            "suite": "what to run: kernels (default) or all (the whole tests/)"})
def test(c: Any, k: str | None = None, suite: str = "kernels", native: bool = False, target: str | None = None,
         image: str | None = None, engine: str | None = None, gpu_mode: str | None = None, gpu_index: str | None = None,
         on: str | None = None, gpus: str | None = None, profile: str | None = None, resume: str | None = None,
         dry_run: bool = False) -> None:
    """Compile the kernels and check them against PyTorch, in the target's container (or --native, or --on slurm)."""
    run_job(c, jobs.test(k, suite=suite), locals())
