"""`invoke build-kernels`: compile every kernel op ahead of time, in the target's container or natively."""
from __future__ import annotations

from invoke import Context, Exit

from . import ENGINE_HELP, configured_target, task


@task(help={
    "k": "only ops whose name matches EXPR (like pytest -k: words, and, or, not)",
    "verbose": "show the compiler's full output",
    "native": "build with this Python's torch, without a container",
    "target": "image target to build in (default: kernellab.target in invoke.yaml)",
    "engine": ENGINE_HELP,
})
def build_kernels(c: Context, k: str | None = None, verbose: bool = False, native: bool = False,
                  target: str | None = None, engine: str | None = None) -> None:
    """Build kernel ops ahead of time; print compile time and registers/spills per kernel."""
    argv = ["build", *(["-k", k] if k else []), *(["--verbose"] if verbose else [])]
    if native:
        from ..ops import main

        code = main(argv)
    else:
        from ..containers import run_in_target

        code = run_in_target(configured_target(c, target),
                             ["python", "-m", "kernellab.ops", *argv], gpu=True)
    if code:
        raise Exit(code=code)
