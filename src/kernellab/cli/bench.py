"""`invoke bench`: check and time kernels against their baselines, in the target's container."""
from __future__ import annotations

from pathlib import Path

from invoke import Context, Exit

from .. import ROOT
from ..errors import BenchError
from . import ENGINE_HELP, configured_target, task


@task(help={
    "target": "image target to run in (default: kernellab.target in invoke.yaml)",
    "k": "only ops whose name matches EXPR",
    "native": "run in this Python, without a container (CPU timing where no GPU is visible)",
    "quick": "first bench shape only, short measurements: a sanity check, not a figure to publish",
    "compare": "an earlier run (results/<run>): each row same/faster/slower; exit 1 on a regression",
    "out": "the run's folder (default results/<date>-<gpu>)",
    "engine": ENGINE_HELP,
})
def bench(c: Context, target: str | None = None, k: str | None = None, native: bool = False,
          quick: bool = False, compare: str | None = None, out: str | None = None, engine: str | None = None) -> None:
    """Benchmark kernels against PyTorch baselines; results in results/<run>/."""
    argv = [*(["-k", k] if k else []), *(["--quick"] if quick else [])]
    if native:
        from ..bench import main

        argv += [*(["--compare", compare] if compare else []), *(["--out", out] if out else [])]
        code = main(argv)
    else:
        from ..containers import run_in_target

        # The container sees the repository at /workspace: hand it paths relative to the repository.
        argv += [*(["--compare", _in_repo(compare)] if compare else []), *(["--out", _in_repo(out)] if out else [])]
        code = run_in_target(configured_target(c, target),
                             ["python", "-m", "kernellab.bench", *argv], gpu=True)
    if code:
        raise Exit(code=code)


def _in_repo(path: str) -> str:
    resolved = Path(path).resolve()
    if not resolved.exists() and (ROOT / "results" / path).exists():
        resolved = (ROOT / "results" / path).resolve()  # a bare run name
    if not resolved.is_relative_to(ROOT):
        raise BenchError(f"{path} is outside the repository, which is all the container sees; "
                         "copy it under results/ or use --native.")
    return str(resolved.relative_to(ROOT))
