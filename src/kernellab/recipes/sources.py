"""Pinned sources: fetched with git itself, verified against the recipe, patched into a build context.

git does the fetching, so a site mirror configured the git way (`url.<mirror>.insteadOf https://github.com/`,
in ~/.gitconfig or GIT_CONFIG_*) works unchanged. Local-path mirrors need submodules fetched over the file
protocol, which git refuses by default; kernellab allows it for these fetches only. A verified checkout is
kept per (URL, full commit) under $KERNELLAB_CACHE/recipes/sources and shared by every recipe that pins it.

A folder source (`path = "paper"`: code kept beside the recipe, such as the demo's) is first made into a commit
with a fixed author, date and message, so that its commit is a function of its files alone: the recipe pins that
commit like any other, a changed file is a changed commit (refused until the recipe pins it), and from there it is
fetched, checked out and verified as a URL's source is.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
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
    where = source.url.split("://", 1)[-1] if source.folder is None else f"local/{source.name}"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", where).strip("_")
    return cache_root() / "recipes" / "sources" / f"{slug}-{source.commit}"


#: A folder source's commit: the same files give the same commit on every machine.
_FOLDER_IDENTITY = {"GIT_AUTHOR_NAME": "kernellab", "GIT_AUTHOR_EMAIL": "kernellab@localhost",
                    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00+0000", "GIT_COMMITTER_NAME": "kernellab",
                    "GIT_COMMITTER_EMAIL": "kernellab@localhost", "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000"}


def _folder_store() -> Path:
    """One bare repository holding every folder source's commits (objects are content-addressed: shared safely)."""
    store = cache_root() / "recipes" / "folders.git"
    if not (store / "HEAD").is_file():
        store.parent.mkdir(parents=True, exist_ok=True)
        _git("init", "-q", "--bare", str(store), check=True)
        (store / "info").mkdir(exist_ok=True)
        (store / "info" / "exclude").write_text("__pycache__/\n*.pyc\n")
    return store


def folder_commit(folder: Path) -> str:
    """The commit a folder's files make (stored in the folder store, under a ref of its own)."""
    store = _folder_store()
    with tempfile.TemporaryDirectory(prefix="kl-folder-") as tmp:
        env = {"GIT_DIR": str(store), "GIT_WORK_TREE": str(folder), "GIT_INDEX_FILE": str(Path(tmp) / "index"),
               **_FOLDER_IDENTITY}

        def git(*args: str) -> str:
            return proc.run(["git", "-c", "core.excludesFile=/dev/null", "-c", "core.autocrlf=false",
                             "-c", "core.fileMode=true", *args], env={**GIT_ENV, **env}, check=True).stdout.strip()

        git("add", "-A", ".")
        commit = proc.run(["git", "commit-tree", git("write-tree"), "-m", "a folder of a kernellab recipe"],
                          env={**GIT_ENV, **env}, check=True).stdout.strip()
        git("update-ref", f"refs/heads/c{commit}", commit)
    return commit


def _remote(source: Source) -> str:
    """Where git fetches source from: its URL, or the store holding its folder's commit, checked against the pin."""
    if source.folder is None:
        return source.url
    made = folder_commit(source.folder)
    if made != source.commit:
        raise RecipeError(f"source {source.name}'s folder {source.origin} is commit {made} now, not the recipe's "
                          f"{source.commit}: its files changed since the recipe pinned them. If the change is meant, "
                          f'pin it (commit = "{made}").')
    return str(_folder_store())


def verify_folders(recipe: Recipe) -> None:
    """Every folder source's files checked against its pinned commit (cheap: git hashes a small folder)."""
    for s in recipe.sources:
        if s.folder is not None:
            _remote(s)


def fetched(source: Source) -> dict[str, Any] | None:
    """What an earlier fetch verified ({commit, submodules}), or None when not fetched yet."""
    marker = cached(source) / VERIFIED
    return json.loads(marker.read_text()) if marker.is_file() else None


def fetch(source: Source, out: Any = None) -> dict[str, Any]:
    """Check out source at its commit with every submodule, verify the commits; return what was verified."""
    remote = _remote(source)  # a folder source is checked against its pin on every build
    known = fetched(source)
    if known is not None:
        return known
    dest = cached(source)
    partial = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if out:
        out.write(f"fetching {source.origin} at {source.commit[:12]}\n")
    try:
        _git("init", "-q", str(partial), check=True)
        _git("remote", "add", "origin", remote, cwd=partial, check=True)
        # By commit first (one commit, as GitHub and mirrors allow); else every ref and tag, then look.
        r = _git("fetch", "-q", "--depth", "1", "origin", source.commit, cwd=partial)
        if not r.ok:
            full = _git("fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*", cwd=partial)
            if not full.ok:
                raise RecipeError(f"cannot fetch {source.origin} ({_last(full)}); mirror that repository with commit "
                                  f"{source.commit} and point git at the mirror (`git config --global "
                                  f"url.<mirror>/.insteadOf https://github.com/`, docs/recipes.md).")
        if not _git("checkout", "-q", "--detach", source.commit, cwd=partial).ok:
            raise RecipeError(f"{source.origin} has no commit {source.commit}; check the recipe's commit, or mirror "
                              f"that commit (the mirror may hold another).")
        subs = _submodules(source, partial)
        head = _git("rev-parse", "HEAD", cwd=partial, check=True).stdout.strip()
        if head != source.commit:
            raise RecipeError(f"{source.origin} checked out {head}, not the recipe's {source.commit}.")
        verified = {"url": source.origin, "commit": head, "submodules": subs}
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
        raise RecipeError(f"{source.origin} at {source.commit[:12]}: fetching{where} failed ({_last(r)}); mirror the "
                          f"submodules' repositories ({urls}) at the commits the source pins.")
    status = _git("submodule", "status", "--recursive", cwd=repo, check=True).stdout
    found = {}
    for line in status.splitlines():
        m = re.match(r"^[ +\-U]?([0-9a-f]{40}) (\S+)", line)
        if m:
            found[m.group(2)] = m.group(1)
    for path, want in source.submodules.items():
        if path not in found:
            raise RecipeError(f"{source.origin} at {source.commit[:12]} has no submodule {path} (it has: "
                              f"{', '.join(found) or 'none'}); fix the recipe's submodules table.")
        if found[path] != want:
            raise RecipeError(f"{source.origin}'s submodule {path} is at {found[path]}, not the recipe's {want}; the "
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
    """Patches applied in order to a scratch copy of each already-fetched source (nothing fetched here: a folder
    source is made, not fetched); returns the patches that could not be checked (their source is not fetched)."""
    unchecked = []
    for source in recipe.sources:
        mine = [p for p in recipe.patches if p.source == source.name]
        if not mine:
            continue
        if source.folder is not None:
            fetch(source)
        elif fetched(source) is None:
            unchecked += [p.file.name for p in mine]
            continue
        with tempfile.TemporaryDirectory(prefix="kl-patches-") as tmp:
            scratch = Path(tmp) / source.name
            shutil.copytree(cached(source), scratch, symlinks=True, ignore=shutil.ignore_patterns(VERIFIED))
            for p in mine:
                apply(recipe, p, scratch)
    return unchecked


def apply(recipe: Recipe, patch: Patch, root: Path) -> None:
    # The checkout is its own git repository: paths in the diff are read from its top, never another's.
    r = _git("apply", "--whitespace=nowarn", str(patch.file.resolve()), cwd=root)
    if not r.ok:
        where = re.search(r"patch failed: (\S+):(\d+)", r.stderr)
        hunk = f" at {where.group(1)} line {where.group(2)}" if where else f" ({_last(r)})"
        raise RecipeError(f"patch {patch.file.relative_to(recipe.folder)} does not apply to {patch.source}{hunk}; "
                          f"remake it against commit {_source(recipe, patch.source).commit[:12]} (a checkout of it is "
                          f"{cached(_source(recipe, patch.source))}).")


def _source(recipe: Recipe, name: str) -> Source:
    return next(s for s in recipe.sources if s.name == name)
