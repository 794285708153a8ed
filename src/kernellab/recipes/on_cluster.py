"""`invoke recipe run NAME --on slurm`: the recipe's built image on the cluster, one task per experiment and
GPU type (kernellab.cluster runs them; kernellab.recipes.task is what each runs), then one record per GPU
type, its claims judged on that type's GPU, and one table of verdicts across types."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any, Sequence

from ..cluster import profile as profiles
from ..cluster import runs
from ..errors import RecipeError
from . import build, claims, experiments, manifest, read, record


def submit(name: str, *, gpus: str | None, profile: str | None, k: str | None = None, quick: bool = False,
           target: str | None = None, dry_run: bool = False, resume: str | None = None,
           configured: str | None = None, out: IO[str] = sys.stdout) -> Path:
    """Build the image here (cached), then run the selected experiments on the cluster's GPU types."""
    prof = profiles.load(profiles.find(profile, configured))
    if resume:
        return runs.resume(resume, prof, out=out)
    recipe = read.load(name)
    chosen = experiments.select(recipe, k)
    reading = [e.name for e in chosen if e.inputs]
    if reading:
        raise RecipeError(f"{', '.join(reading)} read inputs (datasets), which a cluster run does not carry to its "
                          f"nodes yet; run them here with `invoke recipe run {recipe.name}`, or choose others with -k.")
    built = build.build(recipe, target=target, out=out)
    req = runs.Request(kind="recipe", gpus=gpus, image=built.tags[0], names=[e.name for e in chosen],
                       command=(str(recipe.folder.resolve()),), quick=quick, dry_run=dry_run, argv=sys.argv,
                       merger=f"{__name__}:merge")
    return runs.start(req, prof, out=out)


def task_output(folder: Path) -> dict[str, Any]:
    """What one task wrote (kernellab.recipes.task): the recipe's name, its image's manifest, its cases."""
    data = json.loads((folder / "cases.json").read_text())
    data["cases"] = [experiments.Case.from_dict(c) for c in data["cases"]]
    data["manifest"] = manifest.Manifest.from_dict(data["manifest"]) if data.get("manifest") else None
    return dict(data)


def merge(local: Path, gpus: Sequence[str], tasks: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    """Per GPU type: its tasks' cases as one record in local/<gpu>/ (claims judged on that GPU); returns the table
    of verdicts across GPU types for the run's summary."""
    verdicts: dict[str, dict[str, claims.Verdict]] = {}
    recipe = None
    for g in gpus:
        parts = [task_output(local / g / name) for gpu, name, _ in tasks if gpu == g
                 and (local / g / name / "cases.json").is_file()]
        if not parts:
            continue
        recipe = read.load(parts[0]["recipe"])
        cases = [c for p in parts for c in p["cases"]]
        status = next((s for gpu, _, s in tasks if gpu == g and s.get("gpus")), {})
        gpu_name = (status.get("gpus") or [{}])[0].get("name")
        judged = claims.judge(recipe, cases, gpu_name=gpu_name)
        verdicts[g] = {v.claim: v for v in judged}
        machine = {"gpu": {"name": gpu_name} if gpu_name else None, "driver": None, "clocks": {},
                   "host": status.get("host"), "gpu_type": g}
        record.write(local / g, record.new(recipe, manifest=parts[0]["manifest"], image_id=parts[0].get("image_id", ""), machine=machine, cases=cases,
                                           verdicts=judged, quick=parts[0].get("quick", False),
                                           packages=parts[0].get("packages", {})))
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

