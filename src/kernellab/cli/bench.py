"""`invoke bench`: check and time kernels against their baselines, in the target's container."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .. import jobs
from ..bench.timing import min_time_seconds
from ..errors import RecipeError, UsageError
from ..ops.spec import compile_select
from ..places import Flags
from . import run_job, task

WHEELHOUSE_HELP = "--against: the recipe image's pip packages from this folder of wheels only (no index needed)"


def refuse_wheelhouse(wheelhouse: str | None, verb: str) -> None:
    """--wheelhouse without --against: there is no recipe image to build."""
    if wheelhouse:
        raise UsageError(f"--wheelhouse is for the recipe image --against builds; `invoke {verb}` without --against "
                         f"installs nothing.")


@task(place=True, help={
    "k": "only ops whose name matches EXPR (like pytest -k: words, and, or, not)",
    "quick": "first bench shape only, short measurements: a sanity check, not a figure to publish",
    "min-time": "seconds of measured time per function before it may stop (default 0.5; the timeout is 20 times it)",
    "compare": "an earlier run (results/<run>): each row same/faster/slower; exit 1 on a regression",
    "out": "the run's folder (default results/<date>-<gpu>)",
    "against": "a recipe whose published system is a baseline too (its [baselines]): run in the recipe's image",
    "wheelhouse": WHEELHOUSE_HELP,
})
def bench(c: Any, k: str | None = None, quick: bool = False, compare: str | None = None, out: str | None = None,
          against: str | None = None, wheelhouse: str | None = None, min_time: str | None = None, *,
          where: Flags) -> None:
    """Benchmark kernels against PyTorch baselines (and a recipe's system: --against); results in results/<run>/."""
    seconds = None if min_time is None else min_time_seconds(min_time)
    if where.on_cluster and (compare or out):
        raise UsageError("--compare and --out are for runs on this machine; a cluster run writes "
                         "results/<run>/ and `invoke bench --compare` works on it afterwards.")
    if against:
        run_against(c, against, lambda offer: jobs.bench(k, quick=quick, compare=compare, out=out, system=offer,
                                                         min_time=seconds),
                    k=k, where=where, verb="bench", wheelhouse=wheelhouse)
        return
    refuse_wheelhouse(wheelhouse, "bench")
    run_job(c, jobs.bench(k, quick=quick, compare=compare, out=out, min_time=seconds), where)


def run_against(c: Any, name: str, make_job: Callable[[str], jobs.Job], *, k: str | None, where: Flags, verb: str,
                wheelhouse: str | None = None) -> None:
    """`--against RECIPE` (bench, profile): the job `make_job(offer_json)` makes, run in recipe `name`'s own image
    (built if missing, cached; its pip packages from the index, or offline from the wheelhouse folder) or natively,
    the recipe's published system offered beside PyTorch's baselines."""
    from ..bench.systems import Offer
    from ..recipes import build as builds
    from ..recipes import read
    if where.on_cluster or where.image:
        raise UsageError(f"--against runs the {verb} in recipe {name}'s own image, here; "
                         f"drop --{'image' if where.image else 'on'}.")
    recipe = read.load(name)
    native = where.native
    if native and wheelhouse:
        raise UsageError(f"--wheelhouse installs recipe {recipe.name}'s image offline; --native builds no image "
                         f"(the system is installed in this Python): drop one of them.")
    if not recipe.baselines:
        raise RecipeError(f"recipe {recipe.name} offers no baselines: a [baselines] table in {recipe.file} maps an op "
                          f"of kernels/ to an adapter file of the recipe (docs/recipes.md).")
    ops = [o for o in recipe.baselines if not k or compile_select(k)(o)]
    if not ops:
        raise RecipeError(f"recipe {recipe.name} offers baselines for {', '.join(recipe.baselines)}, which -k {k!r} "
                          f"does not select.")
    # Repository paths (what a container sees at /workspace); --native may also name a recipe elsewhere.
    seen: Any = (lambda p: str(p.resolve())) if native else (lambda p: jobs.in_repository(p.resolve()))
    offer = Offer(recipe.name, seen(recipe.folder), {op: seen(path) for op, path in recipe.baselines.items()},
                  tuple(p.name for p in recipe.packages), recipe.paper.title)
    job = make_job(offer.to_json())
    if native:
        run_job(c, job, where)
        return
    built = builds.build(recipe, target=where.target, wheelhouse=Path(wheelhouse) if wheelhouse else None)
    print(f"image {built.tags[0]} ({'unchanged' if built.cached else 'built'}): {recipe.name}'s system "
          f"({', '.join(p.requirement for p in recipe.packages) or 'its sources'}) beside PyTorch's baselines")
    run_job(c, job, where, built.image)
