"""What `invoke recipe ...` does: list, check (--fetch), build, run, shell, export (profile:
kernellab.recipes.profile). The tasks call these and print."""
from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path
from typing import IO, Any

from .. import count, gpu, jobs, places, provenance
from ..container.runner import LOCAL, Host, gpu_choice
from ..engine import Engine, resolve_engine
from ..errors import RecipeError
from ..places import DEFAULT, Flags, Place
from . import build as builds
from . import checks, claims, experiments, inputs, manifest, model, read, record, sources, trees, values


class Stopped(KeyboardInterrupt):
    """Ctrl-C during a recipe run, after its record of what ran was written to folder."""

    def __init__(self, folder: Path, ran: int, planned: int):
        super().__init__(f"stopped after {ran} of {count(planned, 'case')}; record: {folder}")
        self.folder, self.ran, self.planned = folder, ran, planned


def listing(root: Path = read.RECIPES) -> str:
    rows = []
    for name in read.names(root):
        try:
            r = read.load(name, root)
            rows.append(f"{name:<18} {r.paper.title} ({r.paper.venue} {r.paper.year}); "
                        f"{count(len(r.experiments), 'experiment')}, {count(len(r.claims), 'claim')}")
        except RecipeError as e:
            rows.append(f"{name:<18} BROKEN: {e}")
    return "\n".join(rows) or f"no recipes in {root}"


def check(name: str, *, target: str | None = None, fetch: bool = False, out: IO[str] | None = None) -> str:
    """Validate the recipe, resolve its environment, check this machine, say how each claim's cases pair (refusing
    a pairing no grid produces): builds nothing. fetch: also every source fetched into its store (through git's
    insteadOf mirror), its commit and submodule pins verified, and the patches applied to a scratch tree, each as a
    build does it (its errors are a build's); still no image, no engine."""
    recipe = read.load(name)
    spec, _ = builds.resolve_target(recipe, target)
    notes = checks.check_host(recipe, gpus=gpu.host_gpus(), built=spec.ccs if spec.cuda else ())
    pairs = [claims.pairing(recipe, i) for i in range(len(recipe.claims))]
    verified = {s.name: sources.fetch(s, out or sys.stdout) for s in recipe.sources} if fetch else {}
    unchecked = trees.check_patches(recipe)
    lines = [f"recipe {recipe.name}: {recipe.paper.title} ({recipe.paper.venue} {recipe.paper.year}) is valid",
             f"  environment: target {spec.target} (CUDA {spec.cuda or 'none'}, torch {spec.torch or ('none' if spec.torch_variant == 'none' else 'from base')}, "
             f"archs {spec.arch_list or '-'})",
             "  sources: " + (", ".join(f"{s.name} {s.commit[:12]}" + _fetched(s, verified.get(s.name))
                                        for s in recipe.sources) or "none"),
             *([f"  packages: {', '.join(p.requirement for p in recipe.packages)} (wheels locked by sha256)"]
               if recipe.packages else []),
             *(["  baselines for invoke bench: " + ", ".join(f"{op} ({path.relative_to(recipe.folder)})"
                                                           for op, path in recipe.baselines.items())]
               if recipe.baselines else []),
             f"  patches: {len(recipe.patches)}" + (f" (not checked until fetched: {', '.join(unchecked)}; "
                                                    f"`invoke recipe check {name} --fetch` fetches and applies them)"
                                                    if unchecked else " (apply cleanly)" if recipe.patches else ""),
             f"  steps: {', '.join(s.name for s in recipe.steps) or 'none'}",
             *(f"  input {i.name}: {i.description} ({_origin(i)})" for i in recipe.inputs),
             "  experiments: " + ", ".join(f"{e.name} ({count(len(e.cases()), 'case')} x {count(e.repeats, 'repeat')})"
                                           for e in recipe.experiments),
             f"  claims: {len(recipe.claims)} ({count(sum(c.judge == 'ratio' for c in recipe.claims), 'ratio')})"
             + (f": {recipe.paper.no_claims}" if recipe.paper.no_claims else ""),
             *(f"    {p}" for p in pairs)]
    if recipe.requirements.note:
        lines.append(f"  GPUs: {recipe.requirements.note}")
    lines += [f"  note: {n}" for n in notes]
    lines += ["  values ({name} in steps and experiments):", *_values(spec)]
    return "\n".join(lines)


def _fetched(source: model.Source, verified: manifest.Verified | None) -> str:
    """What check knows of a source's commit: verified just now (--fetch), in the stores already, or neither."""
    if verified is None:
        return " (fetched)" if sources.fetched(source) else ""
    subs = verified["submodules"]
    pins = f" and submodule{'s' * (len(subs) > 1)} " + ", ".join(f"{p} at {c[:12]}" for p, c in subs.items()) if subs else ""
    return f" ({'made from its folder' if source.folder is not None else 'fetched'}; commit{pins} verified)"


def _values(spec: Any) -> list[str]:
    """The values a step may use: the target's, and the image's own once its image is built (read once per image,
    cached); until then those are said to come from the image."""
    eng = resolve_engine(None)
    image = builds.target_image(spec, eng) if spec.target and eng.answers() else None
    facts = values.probe(image, eng) if image else {}
    known = values.values(spec, {**{k: "" for k in values.FROM_IMAGE}, **facts})
    return [f"    {{{k}}} = {known[k] or '(empty)'}" if facts or k not in values.FROM_IMAGE else
            f"    {{{k}}} = (read from kernellab:{spec.target}, which is not built yet)" for k in values.KNOWN]


def _origin(i: model.Input) -> str:
    parts = [f"from {i.url}" + (f", {i.size_gb:g} GB" if i.size_gb else "") if i.url else "generated"]
    if i.stand_in:
        parts.append(f"stand-in: {i.stand_in.description}")
    if i.quick:
        parts.append(f"--quick: {i.quick.description}")
    return "; ".join(parts)


def run(name: str, *, where: Flags = DEFAULT, k: str | None = None, quick: bool = False, stand_in: bool = False,
        wheelhouse: Path | None = None, place: Place | None = None, results: Path = record.RESULTS,
        engine: Engine | None = None, out: IO[str] = sys.stdout) -> tuple[Path, list[claims.Verdict], list[experiments.Case]]:
    """Build (cached), run the selected experiments, judge the claims, write the record; return its folder.

    Every case is a job (kernellab.jobs.recipe_case) of one place: a container of the built image where the place
    flags say (this machine, or --host), with the GPUs they say (a test may hand its own place)."""
    recipe = read.load(name)
    selected = experiments.select(recipe, k)
    eng = resolve_engine(engine).require()
    target, gpu_mode, host = where.target, gpu_choice(where.gpu_mode), places.hosted(where.host)
    chosen_gpus = chosen_gpus_of(where.gpu_index, host)
    # Before the build (which may take minutes): what this target can run, and whether this machine can.
    spec, _ = builds.resolve_target(recipe, target)
    chosen = experiments.runnable(selected, cuda=spec.cuda, target=spec.target, recipe=recipe, out=out)
    absent = {e.name: f"not selected by -k {k!r}" for e in recipe.experiments if e not in selected}
    absent |= {e.name: f"it needs CUDA, and target {spec.target} has none" for e in selected if e not in chosen}
    checks.check_gpu_mode(recipe, spec, gpu_mode)
    checks.check_host(recipe, gpus=chosen_gpus, run=True, built=spec.ccs if spec.cuda else ())
    built = builds.build(recipe, target=target, wheelhouse=wheelhouse, engine=eng, out=out)
    out.write(f"image {built.tags[0]} ({'unchanged, not rebuilt' if built.cached else f'built in {built.seconds:.0f} s'})\n")
    place = place or places.container(where, built.image, host, eng)
    ready = inputs.prepare_all(recipe, inputs.needed(chosen), place=place, quick=quick, stand_in=stand_in, out=out)
    machine, checkout = machine_of(host, chosen_gpus[0] if chosen_gpus else None), provenance.Checkout.here()
    folder = record.run_folder(recipe.name, machine.gpu_name, results)
    cases: list[experiments.Case] = []
    planned = len(experiments.planned(chosen, quick))
    try:
        experiments.run_all(chosen, built.env.values, place=place, raw=folder / "raw", quick=quick, out=out,
                            cases=cases, mounts=lambda e: inputs.mounts(ready, e))
    except KeyboardInterrupt:
        raise Stopped(folder, len(cases), planned) from None
    finally:  # interrupted or not, what ran is recorded (claims whose cases did not run say so), and how far it got
        absent |= {e.name: "the run stopped before it" if len(cases) < planned else "not in --quick's grid" if quick
                   else "not in its grid" for e in chosen}
        try:
            verdicts = _record(recipe, folder, cases, built, machine, checkout, ready, k=k, quick=quick, eng=eng,
                               planned=planned, absent=absent)
        except Exception as e:
            record.salvage(folder, recipe=recipe.name, cases=cases, why=f"writing the record failed ({e})")
            raise
    return folder, verdicts, cases


def _record(recipe: model.Recipe, folder: Path, cases: list[experiments.Case], built: builds.Built,
            machine: provenance.Machine, checkout: provenance.Checkout, ready: dict[str, inputs.Ready], *,
            k: str | None, quick: bool, eng: Engine, planned: int, absent: dict[str, str]) -> list[claims.Verdict]:
    verdicts = claims.judge(recipe, cases, gpu_name=machine.gpu_name, stand_ins=inputs.stand_ins(recipe, ready),
                            absent=absent)
    run = record.new(recipe, manifest=manifest.read(recipe.name, built.image_id, eng), image_id=built.image_id,
                     image_facts=image_facts(recipe, built, eng), machine=machine, checkout=checkout, cases=cases,
                     verdicts=verdicts, quick=quick, select=k, planned=planned, stopped_early=len(cases) < planned,
                     date=provenance.now(), argv=list(sys.argv), engine=eng.name,
                     inputs={n: r.to_dict() for n, r in ready.items()},
                     packages=builds.wheels_in(recipe, built.image_id, eng) if recipe.packages else {})
    record.write(folder, run)
    return verdicts


def image_facts(recipe: model.Recipe, built: builds.Built, eng: Engine) -> dict[str, str | None]:
    """What only this machine knows of a recipe's image (its tag, its target's lock, its manifest's hash), for a
    record's provenance (a run's, a profile's)."""
    labels = builds.verified_image(recipe, built.image)
    return {"tag": built.tags[0], "base_lock_sha256": eng.labels(built.env.base_id).get("kernellab.lock-sha256"),
            "recipe_manifest_sha256": labels.get("kernellab.recipe-manifest-sha256")}


def machine_of(host: Host, chosen: gpu.HostGpu | None) -> provenance.Machine:
    """The machine a run's (a profile's) record names: this one, its GPU's clocks read now; or the server --host
    names, as it listed its GPUs (host.gpus()), without clocks, which nothing here can read."""
    if host is LOCAL:
        return provenance.Machine.here(chosen)
    return provenance.Machine.of(host.hostname(), chosen)


def chosen_gpus_of(gpu_index: str | None, host: Host = LOCAL) -> list[gpu.HostGpu]:
    """The GPUs of the host a run's container gets, as kernellab.container.runner picks them (--gpu-index, Slurm's,
    CUDA_VISIBLE_DEVICES); the first of all of them without a selection."""
    there = host.gpus()
    selected = host.selected_gpus(gpu_index)
    return there[:1] if selected is None else [g for g in there if str(g.index) in selected]


def shell(name: str, *, step: int | None = None, where: Flags = DEFAULT, engine: Engine | None = None,
          out: IO[str] = sys.stdout) -> int:
    """A shell in the recipe's image, or in the state before step N (/src as step N finds it), with the prepared
    sources of this machine mounted writable at /sources: fix there, turn the fix into a patch, build again."""
    recipe = read.load(name)
    if step is not None and not 1 <= step <= len(recipe.steps):
        raise RecipeError(f"--step {step}: recipe {recipe.name} has steps 1 to {len(recipe.steps)} "
                          f"({', '.join(s.name for s in recipe.steps)}).")
    eng = resolve_engine(engine).require()
    built = builds.build(recipe, target=where.target, upto=step, engine=eng, out=out)
    # The user's own copy of the patched sources: kept between shells, and never read by a build.
    mine = (values.context_dir(recipe.name) / "sources").resolve()
    if not mine.is_dir():
        trees.prepare(recipe, mine, out)
    if step is not None:
        nxt = recipe.steps[step - 1]
        out.write(f"/src is the image as step {step} ({nxt.name}) finds it; that step runs:\n  cd /src/{nxt.cwd} && "
                  f"{model.substitute(nxt.run, built.env.values)}\n/sources is {mine} (your copy of the patched "
                  f"sources, writable, kept; no build reads it; delete it for a fresh one): `git -C {mine} diff` there "
                  f"shows the recipe's patches and your fix; save the fix as recipes/{recipe.name}/patches/NAME.diff, "
                  f"add it to recipe.toml, build again.\n")
    return places.container(where, built.image, engine=eng).run(
        dataclasses.replace(jobs.shell(), interactive=True, mounts=(f"{mine}:/sources",)))


def export(name: str, output: Path, *, target: str | None = None, runs: tuple[Path, ...] = (),
           chunk_size: str = "2G", engine: Engine | None = None, out: IO[str] = sys.stdout) -> Path:
    """The built image, the recipe and its runs as one verified bundle (kernellab.transfer's format)."""
    from ..transfer import export as transfer_export

    recipe = read.load(name)
    eng = resolve_engine(engine).require()
    built = builds.build(recipe, target=target, engine=eng, out=out)
    mine, left = _runs_of(built.image_id, runs or tuple(p.parent for p in sorted((record.RESULTS / recipe.name).glob("*/run.json"))))
    if runs and left:
        raise RecipeError(f"{', '.join(str(r) for r, _ in left)} {'was' if len(left) == 1 else 'were'} not run with "
                          f"the image being exported ({built.image_id[:19]}): {left[0][1]}; export only its runs.")
    bundle = transfer_export.export_image(built.tags[0], output, chunk_size=chunk_size, engine=eng)
    extra = bundle / "recipe"
    shutil.copytree(recipe.folder, extra / recipe.name, ignore=shutil.ignore_patterns("__pycache__"))
    for r in mine:
        shutil.copytree(r, extra / "runs" / r.name)
    transfer_export.add_files(bundle, extra)
    out.write(f"runs packed: {', '.join(r.name for r in mine) or 'none'}\n")
    for r, why in left:
        out.write(f"left out: {r.name} ({why})\n")
    return bundle


def _runs_of(image_id: str, runs: tuple[Path, ...]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The runs made with image_id, finished; and the others with why each is left out."""
    mine, left = [], []
    for r in runs:
        try:
            run = record.load(r)
        except RecipeError as e:
            left.append((r, str(e)))
            continue
        if run.image.id != image_id:
            left.append((r, f"made with image {run.image.id[:19]}"))
        elif not run.finished:
            left.append((r, "stopped early: not a finished run"))
        else:
            mine.append(r)
    return mine, left
