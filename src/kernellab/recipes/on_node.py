"""One experiment of a recipe, run inside its built image on a cluster node (`invoke recipe run --on slurm`):

    python -m kernellab.recipes.on_node RECIPE EXPERIMENT [--quick] --out FOLDER   (kernellab.jobs.recipe_run)

The cluster task is already the container (GPU attached, /workspace the run's snapshot of the repository), so
each case's job runs here in the Native place, as a process, in /src. It writes FOLDER/cases.json (what
`invoke recipe run` records for a case, and what only this node knows of the run: its machine, GPU, driver and
clocks) and FOLDER/raw/, which the submitting side gathers and judges per GPU type (kernellab.recipes.on_cluster;
the checkout and the image ID come from the plan there, on every runtime). Standard library and kernellab's
source only: the image's Python runs it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import KernellabError
from ..places import Native, Place
from ..provenance import Machine
from . import experiments, manifest, pins, read

#: Where a recipe's image keeps its manifest (with the values its commands were built with) and the recipe itself.
MANIFEST = Path(manifest.IN_IMAGE)
IN_IMAGE = Path("/recipe")


def main(argv: list[str] | None = None, place: Place | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernellab.recipes.on_node", description=__doc__.splitlines()[0])
    p.add_argument("recipe", help="the recipe's folder as the submitting side named it (its name is the last part)")
    p.add_argument("experiment")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        # The recipe as the image was built from it, else (an image made otherwise) the repository's.
        name = Path(a.recipe).name
        recipe = read.load_folder(IN_IMAGE, name) if (IN_IMAGE / "recipe.toml").is_file() else read.load(a.recipe)
        exp = recipe.experiment(a.experiment)
        made_of = manifest.load(MANIFEST)
        a.out.mkdir(parents=True, exist_ok=True)
        cases = experiments.run_all([exp], made_of.values if made_of else {}, place=place or Native(), raw=a.out / "raw",
                                    quick=a.quick, out=sys.stdout)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code or 1
    report = Path(pins.REPORT)  # the system's packages as this image's pip layer installed them
    done = {"recipe": a.recipe, "quick": a.quick, "machine": Machine.of_task(os.environ).to_dict(),
            "manifest": made_of.to_dict() if made_of else None, "cases": [c.to_dict() for c in cases],
            "packages": pins.wheels(report.read_text(), recipe) if recipe.packages and report.is_file() else {}}
    (a.out / "cases.json").write_text(json.dumps(done, indent=1) + "\n")
    return 1 if any(c.problem for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
