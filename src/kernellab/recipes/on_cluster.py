"""`invoke recipe run NAME --on slurm`: the recipe's built image on the cluster, one task per experiment and
GPU type (a job whose parts are the experiments, kernellab.jobs.recipe_run, submitted by kernellab.places.Cluster
as every job is; kernellab.recipes.on_node is what each runs), then one record per GPU type, its claims judged on that
type's GPU, and one table of verdicts across types (merge(), the job's merger)."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Sequence, TypedDict

from .. import engine, jobs
from ..engine import Engine, Image
from ..errors import KernellabError, RecipeError
from ..provenance import Checkout, GpuFacts, Machine, now
from . import build, claims, experiments, manifest, read, record
from .pins import Wheel

if TYPE_CHECKING:
    from ..cluster.follow import Outcome


def job(name: str, *, k: str | None = None, quick: bool = False, target: str | None = None,
        out: IO[str] = sys.stdout) -> tuple[jobs.Job, Image]:
    """The recipe's image built here (cached) and the job that runs the selected experiments in it on a cluster."""
    recipe = read.load(name)
    chosen = experiments.select(recipe, k)
    reading = [e.name for e in chosen if e.inputs]
    if reading:
        raise RecipeError(f"{', '.join(reading)} read inputs (datasets), which a cluster run does not carry to its "
                          f"nodes yet; run them here with `invoke recipe run {recipe.name}`, or choose others with -k.")
    built = build.build(recipe, target=target, out=out)
    return jobs.recipe_run(str(recipe.folder.resolve()), [e.name for e in chosen], quick=quick), built.image


class TaskOutput(TypedDict):
    """What one task wrote (kernellab.recipes.on_node): the recipe's name, whether --quick, the node's machine, its
    image's manifest, its cases and packages."""

    recipe: str
    quick: bool
    machine: Machine | None
    manifest: manifest.Manifest | None
    cases: list[experiments.Case]
    packages: dict[str, Wheel]
    image_id: str              # tasks before the plan named the image: KERNELLAB_IMAGE_ID, set on Docker only


def task_output(folder: Path) -> TaskOutput:
    data = json.loads((folder / "cases.json").read_text())
    return TaskOutput(recipe=data["recipe"], quick=data.get("quick", False),
                      machine=Machine.from_dict(data["machine"]) if data.get("machine") else None,
                      manifest=manifest.Manifest.from_dict(data["manifest"]) if data.get("manifest") else None,
                      cases=[experiments.Case.from_dict(c) for c in data["cases"]],
                      packages=data.get("packages") or {}, image_id=data.get("image_id", ""))


def planned(local: Path) -> tuple[dict[str, str], list[str], str | None, Checkout]:
    """What the submitting side put in the run's plan (cluster.json, kernellab.cluster.report.record): the image
    the nodes ran (its ID and reference), the command line, the runtime and the kernellab checkout."""
    path = local / "cluster.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    return (dict(data.get("image") or {}), list(data.get("argv") or []), data.get("runtime"),
            Checkout.from_dict(data.get("checkout") or {}))


def image_facts(image_id: str, base_id: str | None, eng: Engine | None = None) -> dict[str, str | None]:
    """What this machine's engine knows of the image the nodes ran (its labels and its base's), as a run here
    records them (recipes.reproduce.image_facts); nothing where the engine no longer has it."""
    try:
        eng = eng or engine.current()
        return {"base_lock_sha256": eng.labels(base_id).get("kernellab.lock-sha256") if base_id else None,
                "recipe_manifest_sha256": eng.labels(image_id).get("kernellab.recipe-manifest-sha256")}
    except KernellabError:
        return {}


def merge(local: Path, gpus: Sequence[str], outcomes: Sequence[Outcome], *, eng: Engine | None = None) -> str:
    """Per GPU type: its tasks' cases as one record in local/<gpu>/ (claims judged on that GPU), its provenance
    collected as a run here collects it (the machine by the node, the checkout and image ID from the plan); returns
    the table of verdicts across GPU types for the run's summary."""
    verdicts: dict[str, dict[str, claims.Verdict]] = {}
    recipe = None
    image, argv, runtime, checkout = planned(local)
    for g in gpus:
        parts = [task_output(local / g / o.task.name) for o in outcomes if o.task.gpu == g
                 and (local / g / o.task.name / "cases.json").is_file()]
        if not parts:
            continue
        made = parts[0]
        recipe = read.load(made["recipe"])
        cases = [c for p in parts for c in p["cases"]]
        status = next((o.status for o in outcomes if o.task.gpu == g and o.status.get("gpus")), {})
        machine = replace(made["machine"] or Machine(status.get("host")), gpu_type=g)
        gpu_name = machine.gpu_name or (status.get("gpus") or [{}])[0].get("name")
        if machine.gpu is None and gpu_name:  # a task from before the node collected its machine
            machine = replace(machine, gpu=GpuFacts(name=gpu_name))
        judged = claims.judge(recipe, cases, gpu_name=gpu_name)
        verdicts[g] = {v.claim: v for v in judged}
        image_id = image.get("id") or made["image_id"]
        base_id = made["manifest"].base_image if made["manifest"] else None
        facts = {"tag": image.get("ref"), **(image_facts(image_id, base_id, eng) if image_id else {})}
        record.write(local / g, record.new(recipe, manifest=made["manifest"], image_id=image_id, image_facts=facts,
                                           machine=machine, checkout=checkout, cases=cases, verdicts=judged,
                                           quick=made["quick"], packages=made["packages"], date=now(), argv=argv,
                                           engine=runtime))
    if recipe is None:
        return "No task left cases to judge: the task table below says why."
    rows = ["| claim | paper | " + " | ".join(gpus) + " |", "|---|---|" + "---|" * len(gpus)]
    for c in recipe.claims:
        cells = []
        for g in gpus:
            v = verdicts.get(g, {}).get(c.name)
            cells.append("-" if v is None else
                         f"{'-' if v.measured is None else f'{v.measured:.3g}{v.unit}'} ({v.verdict})")
        first = next((v for per in verdicts.values() for v in per.values() if v.claim == c.name), None)
        paper = f"{first.claimed:.3g}{first.unit} ({c.gpu})" if first else c.gpu
        rows.append(f"| {c.name} | {paper} | " + " | ".join(cells) + " |")
    return "## Claims per GPU type\n\n" + "\n".join(rows)

