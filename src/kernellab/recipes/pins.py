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
from typing import IO, Any, Literal

from .. import shown
from ..errors import RecipeError
from .model import Recipe

Mode = Literal["prefer", "strict", "update"]
#: What the recipe's pip layer added or changed, one `name==version` per line (written in the image).
ADDED = "/etc/kernellab/recipe-pip.txt"
FOLDER = "locks"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def path(recipe: Recipe, target: str) -> Path:
    return recipe.folder / FOLDER / f"{target}.json"


def read(recipe: Recipe, target: str) -> dict[str, Any] | None:
    p = path(recipe, target)
    if not p.is_file():
        return None
    try:
        lock = json.loads(p.read_text())
        if not isinstance(lock.get("pip"), dict) or not isinstance(lock.get("requirements"), list):
            raise ValueError("needs `requirements` (a list) and `pip` (a table)")
    except ValueError as e:
        raise RecipeError(f"{shown(p)} is not a recipe lock ({e}); delete it or build with --update.") from None
    return dict(lock)


def chosen(recipe: Recipe, target: str, mode: Mode, out: IO[str]) -> list[str] | None:
    """The `name==version` list a build installs instead of the recipe's pip list, or None (resolve it)."""
    if not recipe.pip or mode == "update":
        return None
    lock = read(recipe, target)
    where = shown(path(recipe, target))
    if lock is None:
        if mode == "strict":
            raise RecipeError(f"--locked: recipe {recipe.name} has no lock for target {target} ({where}); build it "
                              f"once without --locked to write one, and commit it.")
        return None
    if lock["requirements"] != list(recipe.pip):
        if mode == "strict":
            raise RecipeError(f"--locked: {where} was written for pip {lock['requirements']}, the recipe now asks for "
                              f"{list(recipe.pip)}; build with --update to lock the new list.")
        out.write(f"{where} was written for another pip list; resolving the recipe's packages again\n")
        return None
    return [f"{name}=={version}" for name, version in sorted(lock["pip"].items())]


def parse_added(text: str) -> dict[str, str]:
    """`name==version` lines (pip freeze's form) as a table; other lines (editable, URLs) are not lockable."""
    return {m.group(1): m.group(2) for m in map(_PIN.match, text.split()) if m}


def write(recipe: Recipe, target: str, spec_sha256: str, added: dict[str, str]) -> Path | None:
    """Record what the pip layer installed; None when the lock already says exactly that."""
    if not recipe.pip:
        return None
    p = path(recipe, target)
    old = read(recipe, target)
    if old is not None and old["requirements"] == list(recipe.pip) and old["pip"] == added:
        return None
    lock = {"recipe": recipe.name, "target": target, "target_spec_sha256": spec_sha256,
            "requirements": list(recipe.pip), "pip": dict(sorted(added.items()))}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(lock, indent=2) + "\n")
    return p


def fits(recipe: Recipe, target: str, added: dict[str, str]) -> bool:
    """Whether an image whose pip layer added `added` is what the lock says (True without a lock)."""
    lock = read(recipe, target)
    return lock is None or not recipe.pip or (lock["requirements"] == list(recipe.pip) and lock["pip"] == added)
