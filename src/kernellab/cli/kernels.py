"""`invoke build-kernels`: compile every kernel op ahead of time, in the target's container or natively."""
from __future__ import annotations

from typing import Any

from .. import jobs
from ..places import PLACE_HELP
from . import run_job, task


@task(help={**PLACE_HELP, "k": "only ops whose name matches EXPR (like pytest -k: words, and, or, not)",
            "verbose": "show the compiler's full output"})
def build_kernels(c: Any, k: str | None = None, verbose: bool = False, native: bool = False, target: str | None = None,
                  image: str | None = None, engine: str | None = None, gpu_mode: str | None = None,
                  gpu_index: str | None = None, on: str | None = None, gpus: str | None = None,
                  profile: str | None = None, resume: str | None = None, dry_run: bool = False) -> None:
    """Build kernel ops ahead of time; print compile time and registers/spills per kernel."""
    run_job(c, jobs.build_kernels(k, verbose=verbose), locals())
