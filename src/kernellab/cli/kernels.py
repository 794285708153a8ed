"""`invoke build-kernels`: compile every kernel op ahead of time, in the target's container or natively."""
from __future__ import annotations

from typing import Any

from .. import jobs
from ..places import Flags
from . import run_job, task


@task(place=True, help={"k": "only ops whose name matches EXPR (like pytest -k: words, and, or, not)",
                        "verbose": "show the compiler's full output"})
def build_kernels(c: Any, k: str | None = None, verbose: bool = False, *, where: Flags) -> None:
    """Build kernel ops ahead of time; print compile time and registers/spills per kernel."""
    run_job(c, jobs.build_kernels(k, verbose=verbose), where)
