"""`--against RECIPE` (`invoke bench`, `invoke profile`): a recipe's published system beside your kernel, in the
recipe's own image (built if missing, cached), offered to the run as one Offer (kernellab.bench.systems)."""
from __future__ import annotations

from typing import Any, Callable

from .. import jobs
from ..errors import RecipeError, UsageError
from ..ops.spec import compile_select


def run(c: Any, name: str, make_job: Callable[[str], jobs.Job], *, k: str | None, native: bool, target: str | None,
        image: str | None, gpu_mode: str | None, gpu_index: str | None, on: Any, verb: str) -> None:
    """Run the job `make_job(offer_json)` makes, in recipe `name`'s image (or natively), its system offered."""
    from ..bench.systems import Offer
    from ..recipes import build as builds
    from ..recipes import read
    from . import run_job

    if on or image:
        raise UsageError(f"--against runs the {verb} in recipe {name}'s own image, here; "
                         f"drop --{'image' if image else 'on'}.")
    recipe = read.load(name)
    if not recipe.baselines:
        raise RecipeError(f"recipe {recipe.name} offers no baselines: a [baselines] table in {recipe.file} maps an op "
                          f"of kernels/ to an adapter file of the recipe (docs/recipes.md).")
    ops = [o for o in recipe.baselines if not k or compile_select(k)(o)]
    if not ops:
        raise RecipeError(f"recipe {recipe.name} offers baselines for {', '.join(recipe.baselines)}, which -k {k!r} "
                          f"does not select.")
    # Repository paths (what a container sees at /workspace); --native may also name a recipe elsewhere.
    where: Any = (lambda p: str(p.resolve())) if native else (lambda p: jobs.in_repository(p.resolve()))
    offer = Offer(recipe.name, where(recipe.folder), {op: where(path) for op, path in recipe.baselines.items()},
                  tuple(p.name for p in recipe.packages), recipe.paper.title)
    job = make_job(offer.to_json())
    if native:
        run_job(c, job, {"native": True, "gpu_index": gpu_index})
        return
    built = builds.build(recipe, target=target)
    print(f"image {built.tags[0]} ({'unchanged' if built.cached else 'built'}): {recipe.name}'s system "
          f"({', '.join(p.requirement for p in recipe.packages) or 'its sources'}) beside PyTorch's baselines")
    run_job(c, job, {"image": built.image_id, "gpu_mode": gpu_mode, "gpu_index": gpu_index})
