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
from pathlib import Path
from typing import Any

from .. import proc
from ..engine import Engine
from ..errors import RecipeError

#: Its name in the build context, and where the image keeps it (the only copy).
IN_CONTEXT = "manifest.json"
IN_IMAGE = "/etc/kernellab/recipe-manifest.json"


def write(context: Path, manifest: dict[str, Any]) -> str:
    """The manifest into the build context (the Dockerfile copies it into the image); its sha256."""
    path = context / IN_CONTEXT
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read(recipe: str, image_id: str, eng: Engine) -> dict[str, Any]:
    """What the recipe's image was made of, read from the image itself (whatever cache built it)."""
    argv = eng.probe_argv(image_id, [IN_IMAGE], entrypoint="cat")
    r = proc.run(argv, check=False, timeout=120)
    try:
        return dict(json.loads(r.stdout))
    except ValueError:
        raise RecipeError(f"the image {image_id[:19]} of recipe {recipe} has no readable {IN_IMAGE} "
                          f"({(r.stderr or r.stdout).strip()[-200:]}); rebuild it with `invoke recipe build {recipe} "
                          f"--no-cache`.") from None
