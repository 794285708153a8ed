"""A recipe build's manifest: what the image was made of (sources and submodules at their verified commits, the
patches in the order applied with their reasons, the values its commands used, its pip list and steps).

Written into the build context and copied into the image as IN_IMAGE (its sha256 the label
kernellab.recipe-manifest-sha256); a run reads it back from the image it runs (a cluster task from its own
image's file), so a record names what its image holds, whatever cache built it. This module is its one reader and
writer.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Mapping, TypedDict

from ..engine import Engine
from ..errors import RecipeError
from .values import Values

#: Its name in the build context, and where the image keeps it (the only copy).
IN_CONTEXT = "manifest.json"
IN_IMAGE = "/etc/kernellab/recipe-manifest.json"


class Verified(TypedDict):
    """A source as the build verified it in its own tree: where from, its commit, its submodules' (path -> commit)."""

    url: str
    commit: str
    submodules: dict[str, str]


class Applied(TypedDict, total=False):
    """A patch as applied: its file, sha256, the source it patches (records before sources had names lack it) and
    why it is needed."""

    file: str
    sha256: str
    source: str
    reason: str


@dataclass(frozen=True)
class Manifest:
    """What one recipe image was made of."""

    recipe: str
    recipe_sha256: str                     # the build's hash: recipe files, base image, values, format
    target: str | None
    base_image: str                        # the target image's ID
    sources: dict[str, Verified]           # by name, as verified in the build's own tree
    patches: list[Applied]                 # in the order applied
    values: Values                         # the values its commands used
    pip: list[str] = field(default_factory=list)
    steps: list[dict[str, str]] = field(default_factory=list)   # the recipe's steps (model.Step's fields)
    recipe_files_sha256: str = ""
    spec_sha256: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Manifest:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})  # type: ignore[arg-type]


def write(context: Path, manifest: Manifest) -> str:
    """The manifest into the build context (the Dockerfile copies it into the image); its sha256."""
    path = context / IN_CONTEXT
    path.write_text(json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(path: Path) -> Manifest | None:
    """The manifest at path (a cluster task reads its own image's), or None where there is none."""
    if not path.is_file():
        return None
    try:
        return Manifest.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, AttributeError) as e:
        raise RecipeError(f"{path} is not a recipe image's manifest ({e}); rebuild the image.") from None


def read(recipe: str, image_id: str, eng: Engine) -> Manifest:
    """What the recipe's image was made of, read from the image itself (whatever cache built it)."""
    r = eng.read_file(image_id, IN_IMAGE)
    try:
        return Manifest.from_dict(json.loads(r.stdout))
    except (ValueError, TypeError):
        raise RecipeError(f"the image {image_id[:19]} of recipe {recipe} has no readable {IN_IMAGE} "
                          f"({(r.stderr or r.stdout).strip()[-200:]}); rebuild it with `invoke recipe build {recipe} "
                          f"--no-cache`.") from None
