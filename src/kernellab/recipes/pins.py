"""A recipe's pins: the Python packages its build added to the target's image, `name==version`, per target.

`recipes/<name>/locks/<target>.json` (the recipe's lock file) is written by the first build that resolved them
and committed with the recipe, like docker/locks/<target>.json for a target. Later builds install exactly those
versions (`prefer`, the default), refuse to build without pins that fit the recipe's `pip` list (`strict`,
`--locked`), or resolve afresh and rewrite them (`update`, `--update`). The target's own packages are the
target's lock. What one build was made of is its manifest (kernellab.recipes.manifest).
This module is the one reader and writer of the pins.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Literal, TypedDict

from .. import envinfo, shown
from ..errors import RecipeError
from .model import Recipe

Mode = Literal["prefer", "strict", "update"]
#: What the recipe's pip layer added or changed, one `name==version` per line (written in the image).
ADDED = "/etc/kernellab/recipe-pip.txt"
FOLDER = "locks"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


class Wheel(TypedDict):
    """A package of the recipe's system as its image installed it: the version and its wheel's sha256."""

    version: str
    sha256: str


class Lock(TypedDict, total=False):
    """recipes/<name>/locks/<target>.json: what the pip layer added (pip: name -> version) for the recipe's pip list
    (requirements), and the wheels of the recipe's packages."""

    recipe: str
    target: str
    target_spec_sha256: str
    requirements: list[str]
    pip: dict[str, str]
    wheels: dict[str, Wheel]


def path(recipe: Recipe, target: str) -> Path:
    return recipe.folder / FOLDER / f"{target}.json"


def read(recipe: Recipe, target: str) -> Lock | None:
    p = path(recipe, target)
    if not p.is_file():
        return None
    try:
        lock = json.loads(p.read_text())
        if not isinstance(lock.get("pip"), dict) or not isinstance(lock.get("requirements"), list):
            raise ValueError("needs `requirements` (a list) and `pip` (a table)")
    except ValueError as e:
        raise RecipeError(f"{shown(p)} is not a recipe lock ({e}); delete it or build with --update.") from None
    return Lock(**lock)


def chosen(recipe: Recipe, target: str, mode: Mode, out: IO[str]) -> list[str] | None:
    """The `name==version` list a build installs instead of the recipe's pip list, or None (resolve it)."""
    if not recipe.pip_all or mode == "update":
        return None
    lock = read(recipe, target)
    where = shown(path(recipe, target))
    if lock is None:
        if mode == "strict":
            raise RecipeError(f"--locked: recipe {recipe.name} has no lock for target {target} ({where}); build it "
                              f"once without --locked to write one, and commit it.")
        return None
    if lock["requirements"] != list(recipe.pip_all):
        if mode == "strict":
            raise RecipeError(f"--locked: {where} was written for pip {lock['requirements']}, the recipe now asks for "
                              f"{list(recipe.pip_all)}; build with --update to lock the new list.")
        out.write(f"{where} was written for another pip list; resolving the recipe's packages again\n")
        return None
    return [f"{name}=={version}" for name, version in sorted(lock["pip"].items())]


def parse_added(text: str) -> dict[str, str]:
    """`name==version` lines (pip freeze's form) as a table; other lines (editable, URLs) are not lockable."""
    return {m.group(1): m.group(2) for m in map(_PIN.match, text.split()) if m}


def write(recipe: Recipe, target: str, spec_sha256: str, added: dict[str, str],
          wheels: dict[str, Wheel] | None = None) -> Path | None:
    """Record what the pip layer installed (and the wheels of the recipe's packages: version and sha256); None when
    the lock already says exactly that."""
    if not recipe.pip_all:
        return None
    p = path(recipe, target)
    old = read(recipe, target)
    if wheels is None:  # keep the locked wheels of the packages still asked for, at the versions still asked for
        wanted = {p.name: p.version for p in recipe.packages}
        wheels = {n: w for n, w in ((old or {}).get("wheels") or {}).items() if wanted.get(n) == w.get("version")}
    if old is not None and old["requirements"] == list(recipe.pip_all) and old["pip"] == added and \
            old.get("wheels", {}) == wheels:
        return None
    lock = {"recipe": recipe.name, "target": target, "target_spec_sha256": spec_sha256,
            "requirements": list(recipe.pip_all), "pip": dict(sorted(added.items()))}
    if wheels:
        lock["wheels"] = dict(sorted(wheels.items()))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(lock, indent=2) + "\n")
    return p


#: pip's report of the recipe's pip layer (`pip install --report`): each installed distribution with its archive's hash.
REPORT = envinfo.PIP_REPORT


def wheels(report: str, recipe: Recipe) -> dict[str, Wheel]:
    """The recipe's packages as pip installed them, from pip's report."""
    return {n: Wheel(version=w["version"], sha256=w["sha256"])
            for n, w in envinfo.wheels(report, [p.name for p in recipe.packages]).items()}


def check_wheels(recipe: Recipe, target: str, got: dict[str, Wheel]) -> None:
    """Each package's wheel must be the one its lock names (same version, same sha256), and be there at all."""
    for p in recipe.packages:
        if p.name not in got:
            raise RecipeError(f"the recipe's package {p.requirement} is not in what its pip layer installed (pip's report "
                              f"{REPORT}); is it already in the target image at another version?")
        if got[p.name]["version"] != p.version:
            raise RecipeError(f"pip installed {p.name} {got[p.name]['version']}, not the recipe's {p.version}.")
    locked = ((read(recipe, target) or {}).get("wheels") or {})
    for name, wheel in got.items():
        was = locked.get(name)
        if was and was["version"] == wheel["version"] and was["sha256"] != wheel["sha256"]:
            raise RecipeError(f"{name} {wheel['version']}'s wheel has sha256 {wheel['sha256']}, but "
                              f"{shown(path(recipe, target))} locked {was['sha256']} (version {was['version']}): the "
                              f"index serves another file under that name; find out why before trusting it, or build "
                              f"with --update to lock the new one.")


def fits(recipe: Recipe, target: str, added: dict[str, str]) -> bool:
    """Whether an image whose pip layer added `added` is what the lock says (True without a lock)."""
    lock = read(recipe, target)
    return lock is None or not recipe.pip_all or (lock["requirements"] == list(recipe.pip_all) and lock["pip"] == added)
