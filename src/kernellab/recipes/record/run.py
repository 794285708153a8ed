"""One reproduction run's record, the one type Run: its one writer of run.json (save) and its one reader (load), the
one place a record's provenance is put together (new), and the run's own folder (run_folder)."""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from ... import ROOT
from ...errors import RecipeError
from ...provenance import Checkout, ImageFacts, Machine
from ..claims import Verdict
from ..experiments import Case
from ..inputs import InputFacts
from ..manifest import Applied, Manifest, Verified
from ..model import Paper, Recipe
from ..pins import Wheel
from ..values import Values

RESULTS = ROOT / "results" / "recipes"
FORMAT = "kernellab-recipe-run/1"

#: The checkout's keys in run.json: kept in its "machine" object, where records have always had them.
_PAPER = {f.name for f in fields(Paper)}
_CHECKOUT_KEYS = {"commit": "kernellab_commit", "dirty": "kernellab_dirty", "tree": "kernellab_tree"}


@dataclass
class Run:
    """One reproduction run's record: what ran (cases), what it says (claims), and what it was made with (the
    image, the machine, the kernellab checkout, the sources, patches, values and packages of the image). Written by
    a run here and by a cluster run's merge alike, read back by compare, export and plots."""

    recipe: str
    paper: Paper
    image: ImageFacts
    machine: Machine
    checkout: Checkout
    sources: dict[str, Verified]          # as the build verified them
    patches: list[Applied]                # in the order applied
    cases: list[Case]
    claims: list[Verdict]
    values: Values = field(default_factory=dict)            # the values the build's commands used
    units: dict[str, str] = field(default_factory=dict)     # metric -> unit
    inputs: dict[str, InputFacts] = field(default_factory=dict)
    packages: dict[str, Wheel] = field(default_factory=dict)  # the system's packages as its image installed them
    quick: bool = False
    select: str | None = None
    planned: int | None = None            # the cases the run set out to run
    stopped_early: bool = False           # every planned case is recorded, failed or not, unless the run stopped
    date: str = ""
    argv: list[str] = field(default_factory=list)
    engine: str | None = None             # what ran the image: docker, podman, or a cluster's runtime
    incomplete: str | None = None         # why a record could not be written whole (salvage)

    def to_dict(self) -> dict[str, Any]:
        plain = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name not in ("paper", "image", "machine", "checkout", "cases", "claims")}
        return {"format": FORMAT, **plain, "paper": vars(self.paper), "image": self.image.to_dict(),
                "machine": machine_json(self.machine, self.checkout),
                "cases": [c.to_dict() for c in self.cases], "claims": [v.to_dict() for v in self.claims]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        if data.get("format") != FORMAT:
            raise RecipeError(f"a record of format {data.get('format')!r}, not {FORMAT}: written by another kernellab.")
        typed = ("paper", "image", "machine", "checkout", "cases", "claims", "patches")
        plain = {f.name: data[f.name] for f in fields(cls) if f.name in data and f.name not in typed}
        machine, checkout = _machine(data.get("machine") or {})
        paper = {"link": "", **{k: v for k, v in data["paper"].items() if k in _PAPER}}
        return cls(**plain, paper=Paper(**paper), image=ImageFacts.from_dict(data["image"]),
                   machine=machine, checkout=checkout, patches=_patches(data.get("patches")),
                   cases=[Case.from_dict(c) for c in data.get("cases", [])],
                   claims=[Verdict(**v) for v in data.get("claims", [])])

    @property
    def finished(self) -> bool:
        return not self.stopped_early and not self.incomplete


def _machine(data: Mapping[str, object]) -> tuple[Machine, Checkout]:
    """run.json's "machine" object: the machine, and the kernellab checkout that records keep in it."""
    machine = Machine.from_dict({k: v for k, v in data.items() if k not in _CHECKOUT_KEYS.values()})
    return machine, Checkout.from_dict({k: data.get(v) for k, v in _CHECKOUT_KEYS.items()})


def _patches(data: object) -> list[Applied]:
    """The patches in the order applied (runs before 2026-11-24 kept them as a dict by file name)."""
    if isinstance(data, dict):
        return [Applied(file=k, **v) for k, v in data.items()]
    return list(data or [])  # type: ignore[call-overload]


def new(recipe: Recipe, *, manifest: Manifest | None, image_id: str, machine: Machine, cases: list[Case],
        verdicts: list[Verdict], checkout: Checkout | None = None, image_facts: Mapping[str, str | None] | None = None,
        **rest: Any) -> Run:
    """A run's record from the recipe, the image's manifest (what it was made of, read from the image itself: its
    target, base, sources, patches and values), the provenance and what ran; the one place a record's provenance is
    put together, for a run here and a cluster run alike. image_facts: what only the machine with the image knows
    (tag, base lock, manifest hash)."""
    made = manifest or Manifest(recipe.name, "", None, "", {}, [], {})  # an image made otherwise: none known
    image = ImageFacts(image_id, made.target, made.recipe_sha256, made.base_image).known(image_facts or {})
    return Run(recipe=recipe.name, paper=recipe.paper, image=image, machine=machine,
               checkout=checkout or Checkout(None, None), sources=made.sources, patches=list(made.patches),
               values=made.values, cases=cases, claims=verdicts,
               units={m.name: m.unit for e in recipe.experiments for m in e.metrics}, **rest)


def machine_json(machine: Machine, checkout: Checkout | None) -> dict[str, object]:
    """run.json's "machine" object (profile.json's too): the machine, and the kernellab checkout records keep in it
    (its tree only where one was written)."""
    kept = checkout.to_dict().items() if checkout else ()
    return {**machine.to_dict(), **{_CHECKOUT_KEYS[k]: v for k, v in kept if k != "tree" or v is not None}}


def save(folder: Path, run: Run) -> None:
    """run.json: the record itself (the pages beside it are kernellab.recipes.record.pages')."""
    (folder / "run.json").write_text(json.dumps(run.to_dict(), indent=2, sort_keys=True) + "\n")


def load(folder: Path | str) -> Run:
    path = Path(folder) / "run.json"
    if not path.is_file():
        raise RecipeError(f"{folder} is not a recipe run (no run.json); pass a folder under results/recipes/<name>/.")
    try:
        return Run.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise RecipeError(f"{path} is not a readable recipe record ({type(e).__name__}: {e}).") from None
    except RecipeError as e:
        raise RecipeError(f"{path} is {e}") from None


def run_folder(recipe: str, gpu_name: str | None, root: Path = RESULTS) -> Path:
    """A new folder of this run's own: <date>-<time>-<gpu>, or -2, -3, ... after it when runs start in the same
    second (two -k selections, two GPUs of one model): made atomically, never shared."""
    short = gpu_name.lower().replace("nvidia", "").split()[0] if gpu_name else "nogpu"  # "h100", "a100-sxm4-80gb"
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{short}"
    (root / recipe).mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        folder = root / recipe / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable")
