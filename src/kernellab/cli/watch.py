"""`invoke watch`: rebuild and check one op on every save, in the target's container or natively."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Exit

from .. import jobs
from ..errors import UsageError
from ..ops.spec import KERNELS, find_op
from ..places import Flags, Native, choose
from ..watch.serve import explain_exit
from . import task


@task(place=True, help={"k": "the op to watch: its name, or an expression matching one op (like pytest -k)",
            "bench": "after the checks pass, time one quick benchmark shape",
            "kernels": "another kernels folder (for a container: one inside the repository)"})
def watch(c: Any, k: str | None = None, bench: bool = False, kernels: str | None = None, *, where: Flags) -> None:
    """On every save of an op's files: rebuild what changed, rerun its checks, print the result (Ctrl-C stops)."""
    if not k:
        raise UsageError("name the op to watch: `invoke watch -k OP` (the ops are the folders under kernels/).")
    if where.host:
        raise UsageError("watch rebuilds on every save of this checkout's files, which another machine does not see; "
                         "drop --host (test and bench run there).")
    op = find_op(Path(kernels).resolve() if kernels else KERNELS, k).name  # answered before a container starts
    place = choose(c, where)
    code = place.run(jobs.watch(op, bench=bench, kernels=kernels))
    reason = explain_exit(code, "the watcher" if isinstance(place, Native) else "the container")
    if reason:
        raise Exit(f"kernellab: watch: {reason}", code=code if 0 < code < 256 else 1)
    if code:
        raise Exit(code=code)
