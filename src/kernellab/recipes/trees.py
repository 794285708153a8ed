"""A build's source tree: every source of a recipe made fresh from its verified commit (kernellab.recipes.sources),
the recipe's patches applied in order; a patch that does not apply is one sentence naming a scratch checkout of the
user's own to remake it in (the earlier patches committed there, so `git diff` shows only the user's change)."""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import cache_root, proc
from ..errors import RecipeError
from .manifest import Verified
from .model import Patch, Recipe, Source
from .sources import _FOLDER_IDENTITY, GIT_ENV, _fresh, _git, _last, fetched


def prepare(recipe: Recipe, tree: Path, out: Any = None) -> dict[str, Verified]:
    """Every source fetched (once), made fresh under tree/ from its verified commits, the patches applied in order;
    returns the sources' provenance, as verified for this very tree."""
    if tree.exists():
        shutil.rmtree(tree)
    provenance: dict[str, Verified] = {}
    for s in recipe.sources:  # in order: a later source's dest may lie inside an earlier one's
        provenance[s.name] = _fresh(s, tree / s.dest, out)
    tree.mkdir(parents=True, exist_ok=True)  # a recipe whose system is a package has no sources: /src is empty
    for p in recipe.patches:
        apply(recipe, p, tree / _source(recipe, p.source).dest)
    return provenance


def scratch(recipe: Recipe, source: Source, before: Patch | None = None) -> Path:
    """A checkout of source's commit for the user to remake a patch in: the recipe's patches before `before`
    applied and committed there (so `git diff` shows only the user's change). No build reads it."""
    path = cache_root() / "recipes" / "scratch" / recipe.name / source.name
    if path.exists():
        shutil.rmtree(path)
    _fresh(source, path)
    mine = [p for p in recipe.patches if p.source == source.name]
    earlier = mine[:mine.index(before)] if before in mine else mine
    for p in earlier:
        apply(recipe, p, path)
    if earlier:
        _git("add", "-A", cwd=path, check=True)
        proc.run(["git", "commit", "-q", "-m", "the recipe's patches before " + (before.file.name if before else "yours")],
                 cwd=path, env={**GIT_ENV, **_FOLDER_IDENTITY}, check=True)
    return path


def check_patches(recipe: Recipe) -> list[str]:
    """Patches applied in order to a scratch copy of each already-fetched source (nothing fetched here: a folder
    source is made, not fetched); returns the patches that could not be checked (their source is not fetched)."""
    unchecked = []
    for source in recipe.sources:
        mine = [p for p in recipe.patches if p.source == source.name]
        if not mine:
            continue
        if source.folder is None and not fetched(source):  # a folder source is made below, checked against its pin
            unchecked += [p.file.name for p in mine]
            continue
        with tempfile.TemporaryDirectory(prefix="kl-patches-") as tmp:
            copy = Path(tmp) / source.name
            _fresh(source, copy)
            for p in mine:
                apply(recipe, p, copy)
    return unchecked


def apply(recipe: Recipe, patch: Patch, root: Path) -> None:
    # The checkout is its own git repository: paths in the diff are read from its top, never another's.
    r = _git("apply", "--whitespace=nowarn", str(patch.file.resolve()), cwd=root)
    if not r.ok:
        where = re.search(r"patch failed: (\S+):(\d+)", r.stderr)
        hunk = f" at {where.group(1)} line {where.group(2)}" if where else f" ({_last(r)})"
        source = _source(recipe, patch.source)
        mine = scratch(recipe, source, patch)
        name = patch.file.relative_to(recipe.folder)
        raise RecipeError(f"patch {name} does not apply to {patch.source}{hunk}; remake it against commit "
                          f"{source.commit[:12]} in {mine} (a checkout of yours, the recipe's earlier patches "
                          f"committed there; no build reads it): edit, then `git -C {mine} diff > "
                          f"{recipe.folder / name}`.")


def _source(recipe: Recipe, name: str) -> Source:
    return next(s for s in recipe.sources if s.name == name)
