"""A published system as a baseline: what a recipe offers for ops of kernels/ (`invoke bench --against RECIPE`).

The task layer reads the recipe (its [baselines] table: op -> an adapter file in the recipe, and its [[packages]])
and hands the bench one Offer as JSON; the bench runs in the recipe's image, where the system is installed. An
adapter is a small file of the recipe's own with `baseline(*inputs)`: the op's inputs in, the output out, as a
PyTorch baseline is called. For an op with a [backward], an adapter offers a backward by returning an output that
carries an autograd graph (Liger-Kernel's functions are torch.autograd.Functions): its backward and full pass are
timed through torch.autograd as every implementation's are; one without a graph gets `skipped` rows. It is checked against the op's reference before it is timed, like every candidate
and baseline; a wrong one is a row that says so, never a time. The system's identity (each package's version and
the sha256 of the wheel installed) is read from the image's pip report and goes into the run's results.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import ROOT, envinfo
from ..errors import BenchError

#: pip's report of a recipe image's pip layer.
REPORT = Path(envinfo.PIP_REPORT)


@dataclass(frozen=True)
class Offer:
    """A recipe's baselines: its name (the baseline's name in every table), folder, adapters and packages."""

    name: str
    recipe: str                                   # the recipe's folder, relative to the repository
    adapters: dict[str, str]                      # op -> adapter file, relative to the repository
    packages: tuple[str, ...] = ()                # the system's packages (their wheels are named in the results)
    title: str = ""                               # the paper's title

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Offer:
        try:
            data = json.loads(text)
            return cls(data["name"], data["recipe"], dict(data["adapters"]), tuple(data.get("packages", ())),
                       data.get("title", ""))
        except (ValueError, KeyError, TypeError) as e:
            raise BenchError(f"--system is not an offer of a recipe's baselines ({e}); `invoke bench --against "
                             f"RECIPE` writes it.") from None


@dataclass
class System:
    """An offer, loaded where the bench runs: its adapters as functions, its packages as installed."""

    offer: Offer
    baselines: dict[str, Callable[..., Any]] = field(default_factory=dict)   # op -> baseline(*inputs)
    wheels: dict[str, dict[str, str]] = field(default_factory=dict)         # package -> {version, sha256}

    @property
    def label(self) -> str:
        """`liger (liger-kernel 0.8.5, recipe liger)`: what tables and plots call it."""
        pkgs = ", ".join(f"{n} {w['version']}" for n, w in self.wheels.items())
        return f"{self.offer.name} ({pkgs + ', ' if pkgs else ''}recipe {Path(self.offer.recipe).name})"

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.offer.recipe, "title": self.offer.title, "ops": sorted(self.offer.adapters),
                "packages": self.wheels, "label": self.label}


def load(offer: Offer, report: Path | None = None) -> System:
    """The offer's adapters imported (their system must be importable here: the recipe's image) and its packages'
    wheels read from the image's pip report (else their installed versions, without a hash)."""
    system = System(offer)
    for op, rel in offer.adapters.items():
        system.baselines[op] = _adapter(op, ROOT / rel, offer)
    system.wheels = installed(offer.packages, report or REPORT)
    return system


def _adapter(op: str, path: Path, offer: Offer) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(f"kernellab_adapter_{offer.name}_{op}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise BenchError(f"recipe {offer.name}'s adapter for {op} ({path}) is missing.")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise BenchError(f"recipe {offer.name}'s adapter for {op} cannot import its system ({e}); run the bench in "
                         f"the recipe's image: `invoke bench -k {op} --against {offer.name}`.") from None
    except Exception as e:  # noqa: BLE001  (Triton, say, asks for a GPU driver at import)
        raise BenchError(f"recipe {offer.name}'s adapter for {op} failed as it was imported ({type(e).__name__}: {e}); "
                         f"its system may need a GPU, which this run has none of.") from None
    fn = getattr(module, "baseline", None)
    if not callable(fn):
        raise BenchError(f"{path} defines no baseline(*inputs): an adapter takes the op's inputs and returns its output.")
    return fn


def installed(packages: tuple[str, ...], report: Path) -> dict[str, dict[str, str]]:
    """Each package's version and wheel sha256 as the image's pip report has them; else the version installed."""
    found = envinfo.wheels(report.read_text(), packages) if report.is_file() else {}
    from importlib import metadata

    for name in packages:
        if name not in found:
            try:
                found[name] = {"version": metadata.version(name), "sha256": ""}
            except metadata.PackageNotFoundError:
                found[name] = {"version": "not installed", "sha256": ""}
    return found
