"""`invoke bench`: check and time kernels against their baselines, in the target's container."""
from __future__ import annotations

from typing import Any

from .. import jobs
from ..errors import UsageError
from ..places import PLACE_HELP
from . import against as against_
from . import run_job, task


@task(help={
    **PLACE_HELP,
    "k": "only ops whose name matches EXPR (like pytest -k: words, and, or, not)",
    "quick": "first bench shape only, short measurements: a sanity check, not a figure to publish",
    "compare": "an earlier run (results/<run>): each row same/faster/slower; exit 1 on a regression",
    "out": "the run's folder (default results/<date>-<gpu>)",
    "against": "a recipe whose published system is a baseline too (its [baselines]): run in the recipe's image",
})
def bench(c: Any, k: str | None = None, quick: bool = False, compare: str | None = None, out: str | None = None,
          against: str | None = None, native: bool = False, target: str | None = None, image: str | None = None,
          engine: str | None = None, gpu_mode: str | None = None, gpu_index: str | None = None, on: str | None = None,
          gpus: str | None = None, profile: str | None = None, resume: str | None = None, dry_run: bool = False) -> None:
    """Benchmark kernels against PyTorch baselines (and a recipe's system: --against); results in results/<run>/."""
    if (on or resume) and (compare or out):
        raise UsageError("--compare and --out are for runs on this machine; a cluster run writes "
                         "results/<run>/ and `invoke bench --compare` works on it afterwards.")
    if against:
        against_.run(c, against, lambda offer: jobs.bench(k, quick=quick, compare=compare, out=out, system=offer),
                     k=k, native=native, target=target, image=image, gpu_mode=gpu_mode, gpu_index=gpu_index,
                     on=on or resume, verb="bench")
        return
    run_job(c, jobs.bench(k, quick=quick, compare=compare, out=out), locals())
