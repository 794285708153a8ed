"""Tasks: `invoke recipes`, `invoke recipe check|build|run|profile|shell|export NAME`: a paper's system built and judged
on your GPU, and where its time goes. `invoke recipe --help` (or `help`, or no verb) shows the verbs and their flags."""
from __future__ import annotations

from pathlib import Path

from invoke import Context, Exit

from .. import count, jobs
from ..errors import RecipeError, UsageError
from ..places import PLACE_HELP, Flags
from . import run_job, task

VERBS = ("list", "check", "build", "run", "profile", "shell", "export")


@task
def recipes(c: Context) -> None:
    """The recipes under recipes/: paper, experiments, claims (`invoke recipe VERB NAME` uses one)."""
    from ..recipes import reproduce

    print(reproduce.listing())


@task(place=True, positional=["verb", "name"], optional_positional=["name"], verbs=VERBS, help={
    "verb": "list, check, build, run, profile, shell or export (above: what each does)",
    "name": "the recipe (a folder under recipes/, or a path to one)",
    "fetch": "check: also fetch every source through your git mirror, verify its commit and submodule pins, and "
             "apply the patches to a scratch tree (no image, no Docker)",
    "k": "run: only experiments whose name matches EXPR (like pytest -k: words, and, or, not)",
    "quick": "run: one repeat of each experiment's quick grid (a smoke test; claims may then be not run)",
    "stand_in": "run: read each input's generated stand-in, not its data (claims are then not judged)",
    "compare": "run: an earlier run folder (results/recipes/NAME/RUN), printed side by side with this one",
    "out": "run, profile: where runs are recorded (default results/recipes: a run is OUT/NAME/<date>-<time>-<gpu>/, "
           "a profile OUT/NAME/profiles/<date>-<time>-<case>/)",
    "experiment": "profile: the experiment (default: the recipe's first)",
    "case": "profile: the grid point, as k=v[,k=v] (e.g. n=4096; default: the experiment's first)",
    "tool": "profile: nsys (a timeline, the default) or ncu (the timeline, then Nsight Compute on its top kernels)",
    "kernel": "profile --tool ncu: the kernels to profile, a regex over their names (default: the timeline's top 3)",
    "clocks": "profile --tool ncu: each kernel again at the GPU's own clocks, and the share of the SM clock's change "
              "its time followed (about 100%: SM-bound; about 0%: memory)",
    "seconds": "profile: the capture's time limit in seconds (default 600)",
    "step": "shell: the state before step N (the patched sources writable at /sources), to fix step N by hand",
    "target": "build in this target instead of the recipe's environment (checked against the recipe)",
    "wheelhouse": "build: the recipe's pip packages from this folder of wheels only",
    "no_cache": "build: rebuild every step",
    "locked": "build: install exactly the pip versions in recipes/NAME/locks/TARGET.json, or stop saying why not",
    "update": "build: resolve the recipe's pip packages afresh and rewrite its lock",
    "output": "export: the folder to write the bundle into", "chunk_size": "export: chunk size, e.g. 1G",
    **{k: f"run, profile: {PLACE_HELP[k]}" for k in ("on", "gpus", "cluster", "dry_run", "resume")},
    "native": "not for recipes: a recipe runs in its own image", "image": "not for recipes: see --target",
})
def recipe(c: Context, verb: str, name: str | None = None, fetch: bool = False, k: str | None = None, quick: bool = False, stand_in: bool = False,
           compare: str | None = None, step: int | None = None,
           wheelhouse: str | None = None, no_cache: bool = False, locked: bool = False, update: bool = False, output: str = "bundles", chunk_size: str = "2G",
           out: str | None = None, experiment: str | None = None, case: str | None = None,
           tool: str = "nsys", kernel: str | None = None, clocks: bool = False, seconds: float = 600.0, *,
           where: Flags) -> None:
    """Paper recipes: invoke recipe VERB [NAME] [--flags] (docs/recipes.md); each flag says the verbs it serves.

    list          the recipes under recipes/ (also: invoke recipes)
    check NAME    validate, resolve the environment, check this machine, say how each claim's cases pair; builds
                  nothing (--fetch: also fetch the sources, verify their pins, apply the patches; still no image)
    build NAME    sources at their commits, patches, each build step a cached layer, on the target's image
    run NAME      build (cached), run every case, judge every claim, write one record
    profile NAME  one case under Nsight Systems (or Nsight Compute): where its time goes
    shell NAME    a shell in the recipe's image, or in the state before --step N
    export NAME   the image, the recipe and its runs as one verified bundle
    """
    from ..recipes import build as builds
    from ..recipes import read, record, reproduce

    results = Path(out) if out else record.RESULTS
    if where.native or where.image:
        raise UsageError(f"--{'native' if where.native else 'image'}: a recipe runs in its own image, built from the "
                         f"recipe's environment (or --target's).")
    target = where.target
    if verb not in VERBS:
        raise RecipeError(f"`invoke recipe {verb}` is not a verb; use one of {', '.join(VERBS)} "
                          f"(`invoke recipe --help`: the verbs and their flags; `invoke recipes`: the recipes).")
    if verb == "list":
        print(reproduce.listing())
        return
    if not name:
        raise RecipeError(f"`invoke recipe {verb}` needs a recipe: `invoke recipe {verb} NAME` "
                          f"(`invoke recipe list` lists them).")
    wheels = Path(wheelhouse) if wheelhouse else None
    if locked and update:
        raise RecipeError("--locked follows the recipe's lock and --update ignores it; choose one.")
    if verb == "check":
        print(reproduce.check(name, target=target, fetch=fetch))
    elif verb == "build":
        built = builds.build(read.load(name), target=target, wheelhouse=wheels, no_cache=no_cache,
                              locking="strict" if locked else "update" if update else "prefer")
        how = "unchanged: nothing rebuilt" if built.cached else "built"
        print(f"{built.tags[0]} ({built.image_id[:19]}): {how} in {built.seconds:.1f} s")
    elif verb == "run" and where.on_cluster:  # --resume takes the run over as it was planned: nothing to build
        from ..recipes import on_cluster

        job, image = (jobs.Job("recipe", ()), None) if where.resume else on_cluster.job(name, k=k, quick=quick,
                                                                                         target=target)
        run_job(c, job, where, image)
    elif verb == "run":
        old = record.load(compare) if compare else None
        try:
            folder, verdicts, cases = reproduce.run(name, where=where, k=k, quick=quick, stand_in=stand_in,
                                                wheelhouse=wheels, results=results)
        except reproduce.Stopped as stop:
            raise Exit(f"kernellab: interrupted after {stop.ran} of {count(stop.planned, 'case')}; what ran is recorded in "
                       f"{stop.folder}/summary.md (marked STOPPED EARLY).", code=130) from None
        print("\n" + (record.claims_table(verdicts) or "no claims judged: " + (read.load(name).paper.no_claims
                                                                             or "the recipe encodes none")))
        if old is not None:
            print("\n" + record.compare(old, record.load(folder)))
        print(f"\nrecord: {folder}/summary.md")
        failed = [x for x in cases if x.problem]
        if failed:
            raise Exit(f"kernellab: {len(failed)} of {count(len(cases), 'case')} failed (their output: {folder}/raw).", code=1)
    elif verb == "profile" and where.on_cluster:
        from ..recipes import profile_cluster

        job, image = (jobs.Job("recipe-profile", ()), None) if where.resume else profile_cluster.job(
            name, experiment=experiment, case=case, tool=tool, kernel=kernel, clocks=clocks, target=target,
            seconds=seconds,
            dry_run=where.dry_run)
        run_job(c, job, where, image)
    elif verb == "profile":
        from ..recipes import profile as profiles

        folder = profiles.profile(name, experiment=experiment, case=case, tool=tool, kernel=kernel, clocks=clocks,
                                  where=where, seconds=seconds, results=results)
        print((folder / "summary.md").read_text(), end="")
        print(f"\nprofile: {folder}/ (summary.md, profile.json, timeline.png, the .nsys-rep for Nsight Systems' GUI)")
    elif verb == "shell":
        if step is not None and not str(step).isdigit():
            raise RecipeError(f"--step {step}: give a step number (1 is the first step).")
        code = reproduce.shell(name, step=int(step) if step is not None else None, where=where)
        if code:
            raise Exit(code=code)
    else:
        bundle = reproduce.export(name, Path(output), target=target, chunk_size=chunk_size)
        print(f"wrote {bundle}; on the receiver: invoke import-image {bundle.name} (checks the image and the recipe)")
