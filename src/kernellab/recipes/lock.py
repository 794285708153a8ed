"""A recipe's lock: the Python packages its build added to the target's image, pinned, per target.

`recipes/<name>/locks/<target>.json` is written by the first build that resolved them and committed with the
recipe, like docker/locks/<target>.json for a target. Later builds install exactly those versions (`prefer`,
the default), refuse to build without a lock that fits the recipe's `pip` list (`strict`, `--locked`), or
resolve afresh and rewrite the lock (`update`, `--update`). The target's own packages are the target's lock.
The record of what one build was made of (sources and submodules at their commits, patches with their reasons,
the values its commands used, its steps) is beside it: written into the build context, copied into the image as
/etc/kernellab/recipe-lock.json (its sha256 a label), which a run reads back from the image it runs.
This module is the one reader and writer of both.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import IO, Any, Literal

from .. import proc, shown
from ..engine import Engine
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


def pins(recipe: Recipe, target: str, mode: Mode, out: IO[str]) -> list[str] | None:
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


RECORD = "lock.json"


def write_record(context: Path, record: dict[str, Any]) -> str:
    """The build's record into the build context (the Dockerfile copies it into the image); its sha256."""
    path = context / RECORD
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: Where a recipe's image keeps its record (the only copy: a run reads it from the image it runs).
IN_IMAGE = "/etc/kernellab/recipe-lock.json"


def read_record(recipe: str, image_id: str, eng: Engine) -> dict[str, Any]:
    """What the recipe's image was made of, read from the image itself (whatever cache built it)."""
    argv = eng.probe_argv(image_id, [IN_IMAGE], entrypoint="cat")
    r = proc.run(argv, check=False, timeout=120)
    try:
        return dict(json.loads(r.stdout))
    except ValueError:
        raise RecipeError(f"the image {image_id[:19]} of recipe {recipe} has no readable {IN_IMAGE} "
                          f"({(r.stderr or r.stdout).strip()[-200:]}); rebuild it with `invoke recipe build {recipe} "
                          f"--no-cache`.") from None
