"""`invoke watch`: rebuild and check one op on every save, in the target's container or natively."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Exit

from .. import jobs
from ..errors import UsageError
from ..ops.spec import KERNELS, find_op
from ..places import PLACE_HELP, Native, choose
from ..watch.serve import explain_exit
from . import task


@task(help={**PLACE_HELP, "k": "the op to watch: its name, or an expression matching one op (like pytest -k)",
            "bench": "after the checks pass, time one quick benchmark shape",
            "kernels": "another kernels folder (for a container: one inside the repository)"})
def watch(c: Any, k: str | None = None, bench: bool = False, kernels: str | None = None, native: bool = False,
          target: str | None = None, image: str | None = None, engine: str | None = None, gpu_mode: str | None = None,
          gpu_index: str | None = None, on: str | None = None, gpus: str | None = None, profile: str | None = None,
          resume: str | None = None, dry_run: bool = False) -> None:
    """On every save of an op's files: rebuild what changed, rerun its checks, print the result (Ctrl-C stops)."""
    if not k:
        raise UsageError("name the op to watch: `invoke watch -k OP` (the ops are the folders under kernels/).")
    op = find_op(Path(kernels).resolve() if kernels else KERNELS, k).name  # answered before a container starts
    place = choose(c, **{name: value for name, value in locals().items() if name in PLACE_HELP})
    code = place.run(jobs.watch(op, bench=bench, kernels=kernels))
    reason = explain_exit(code, "the watcher" if isinstance(place, Native) else "the container")
    if reason:
        raise Exit(f"kernellab: watch: {reason}", code=code if 0 < code < 256 else 1)
    if code:
        raise Exit(code=code)
