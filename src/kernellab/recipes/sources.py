"""Pinned sources: fetched with git itself, verified against the recipe, patched into a build context.

git does the fetching, so a site mirror configured the git way (`url.<mirror>.insteadOf https://github.com/`,
in ~/.gitconfig or GIT_CONFIG_*) works unchanged. Local-path mirrors need submodules fetched over the file
protocol, which git refuses by default; kernellab allows it for these fetches only. A verified checkout is
kept per (URL, commit) under $KERNELLAB_CACHE/recipes/sources and shared by every recipe that pins it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from .. import cache_root, proc
from ..errors import RecipeError
from .model import Patch, Recipe, Source

VERIFIED = ".kl-verified.json"
#: git never asks for a password here: an unreachable repository is an error, not a prompt.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}


def _git(*args: str, cwd: Path | None = None, check: bool = False, timeout: float = 1800) -> proc.Result:
    return proc.run(["git", "-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false", *args],
                    cwd=cwd, env=GIT_ENV, check=check, timeout=timeout)


def _last(r: proc.Result) -> str:
    lines = [x for x in (r.stderr + r.stdout).strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else f"exit code {r.returncode}"


def cached(source: Source) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", source.url.split("://", 1)[-1]).strip("_")
    return cache_root() / "recipes" / "sources" / f"{slug}-{source.commit[:12]}"


def fetched(source: Source) -> dict[str, Any] | None:
    """What an earlier fetch verified ({commit, submodules}), or None when not fetched yet."""
    marker = cached(source) / VERIFIED
    return json.loads(marker.read_text()) if marker.is_file() else None


def fetch(source: Source, out: Any = None) -> dict[str, Any]:
    """Check out source at its commit with every submodule, verify the commits; return what was verified."""
    known = fetched(source)
    if known is not None:
        return known
    dest = cached(source)
    partial = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if out:
        out.write(f"fetching {source.url} at {source.commit[:12]}\n")
    try:
        _git("init", "-q", str(partial), check=True)
        _git("remote", "add", "origin", source.url, cwd=partial, check=True)
        # By commit first (one commit, as GitHub and mirrors allow); else every ref and tag, then look.
        r = _git("fetch", "-q", "--depth", "1", "origin", source.commit, cwd=partial)
        if not r.ok:
            full = _git("fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*", cwd=partial)
            if not full.ok:
                raise RecipeError(f"cannot fetch {source.url} ({_last(full)}); mirror that repository with commit "
                                  f"{source.commit} and point git at the mirror (`git config --global "
                                  f"url.<mirror>/.insteadOf https://github.com/`, docs/recipes.md).")
        if not _git("checkout", "-q", "--detach", source.commit, cwd=partial).ok:
            raise RecipeError(f"{source.url} has no commit {source.commit}; check the recipe's commit, or mirror "
                              f"that commit (the mirror may hold another).")
        subs = _submodules(source, partial)
        head = _git("rev-parse", "HEAD", cwd=partial, check=True).stdout.strip()
        if head != source.commit:
            raise RecipeError(f"{source.url} checked out {head}, not the recipe's {source.commit}.")
        verified = {"url": source.url, "commit": head, "submodules": subs}
        (partial / VERIFIED).write_text(json.dumps(verified, indent=2, sort_keys=True) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        partial.rename(dest)
        return verified
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _submodules(source: Source, repo: Path) -> dict[str, str]:
    """Every submodule checked out recursively at its recorded commit, and checked against the recipe's pins."""
    r = _git("submodule", "update", "--init", "--recursive", cwd=repo)
    if not r.ok:
        bad = re.search(r"(?:clone of|Unable to fetch in submodule path|in submodule path) '([^']+)'", r.stderr + r.stdout)
        path = bad.group(1) if bad else None
        url = _git("config", "-f", ".gitmodules", "--get-regexp", r"submodule\..*\.url", cwd=repo).stdout
        where = f" submodule {path}" if path else " a submodule"
        urls = ", ".join(line.split()[-1] for line in url.splitlines()) or "(see .gitmodules)"
        raise RecipeError(f"{source.url} at {source.commit[:12]}: fetching{where} failed ({_last(r)}); mirror the "
                          f"submodules' repositories ({urls}) at the commits the source pins.")
    status = _git("submodule", "status", "--recursive", cwd=repo, check=True).stdout
    found = {}
    for line in status.splitlines():
        m = re.match(r"^[ +\-U]?([0-9a-f]{40}) (\S+)", line)
        if m:
            found[m.group(2)] = m.group(1)
    for path, want in source.submodules.items():
        if path not in found:
            raise RecipeError(f"{source.url} at {source.commit[:12]} has no submodule {path} (it has: "
                              f"{', '.join(found) or 'none'}); fix the recipe's submodules table.")
        if found[path] != want:
            raise RecipeError(f"{source.url}'s submodule {path} is at {found[path]}, not the recipe's {want}; the "
                              f"source's commit pins another, so fix one of the two.")
    return found


# --------------------------------------------------------------------------- the build context

def prepare(recipe: Recipe, tree: Path, out: Any = None) -> dict[str, Any]:
    """Fetch every source, copy it under tree/, apply the patches; return the sources' provenance."""
    provenance = {s.name: fetch(s, out) for s in recipe.sources}
    if tree.exists():
        shutil.rmtree(tree)
    for s in recipe.sources:
        shutil.copytree(cached(s), tree / s.dest, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(VERIFIED))
    for p in recipe.patches:
        apply(recipe, p, tree / _source(recipe, p.source).dest)
    return provenance


def check_patches(recipe: Recipe) -> list[str]:
    """Patches checked against already-fetched sources (nothing fetched here); returns what could not be checked."""
    unchecked = []
    for p in recipe.patches:
        source = _source(recipe, p.source)
        if fetched(source) is None:
            unchecked.append(p.file.name)
            continue
        _apply(recipe, p, cached(source), check_only=True)
    return unchecked


def apply(recipe: Recipe, patch: Patch, root: Path) -> None:
    _apply(recipe, patch, root, check_only=False)


def _apply(recipe: Recipe, patch: Patch, root: Path, *, check_only: bool) -> None:
    # The checkout is its own git repository: paths in the diff are read from its top, never another's.
    r = _git("apply", "--whitespace=nowarn", *(["--check"] if check_only else []), str(patch.file.resolve()), cwd=root)
    if not r.ok:
        where = re.search(r"patch failed: (\S+):(\d+)", r.stderr)
        hunk = f" at {where.group(1)} line {where.group(2)}" if where else f" ({_last(r)})"
        raise RecipeError(f"patch {patch.file.relative_to(recipe.folder)} does not apply to {patch.source}{hunk}; "
                          f"remake it against commit {_source(recipe, patch.source).commit[:12]} (a checkout of it is "
                          f"{cached(_source(recipe, patch.source))}).")


def _source(recipe: Recipe, name: str) -> Source:
    return next(s for s in recipe.sources if s.name == name)
