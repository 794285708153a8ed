"""Pinned sources: fetched with git itself, verified against the recipe, patched into a build context.

git does the fetching, so a site mirror configured the git way (`url.<mirror>.insteadOf https://github.com/`,
in ~/.gitconfig or GIT_CONFIG_*) works unchanged. Local-path mirrors need submodules fetched over the file
protocol, which git refuses by default; kernellab allows it for these fetches only. A fetched checkout is kept
per (URL, full commit) under $KERNELLAB_CACHE/recipes/sources and shared by every recipe that pins it, but never
trusted: every build copies it and makes the copy its commit again by git itself (`reset --hard`, `clean`, every
submodule at the commit its parent records), checking the commits against the recipe's pins, so an edit in the
cache reaches no image. Where a patch must be remade, a scratch checkout of the user's own is made for it.

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
        commit = git("commit-tree", git("write-tree"), "-m", "a folder of a kernellab recipe")
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
                raise RecipeError(f"cannot fetch {source.origin}{_rewritten(remote)} ({_last(full)}); mirror that "
                                  f"repository with commit "
                                  f"{source.commit} and point git at the mirror (`git config --global "
                                  f"url.<mirror>/.insteadOf https://github.com/`, docs/recipes.md).")
        if not _git("checkout", "-q", "--detach", source.commit, cwd=partial).ok:
            raise RecipeError(f"{source.origin} has no commit {source.commit}; check the recipe's commit, or mirror "
                              f"that commit (the mirror may hold another).")
        verified = restore(source, partial)
        (partial / VERIFIED).write_text(json.dumps(verified, indent=2, sort_keys=True) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        partial.rename(dest)
        return verified
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _rewritten(url: str) -> str:
    """" through URL2" where git's insteadOf rewrites url (a mirror), else "": what git really tried."""
    r = _git("ls-remote", "--get-url", url, timeout=30)
    got = r.stdout.strip() if r.ok else ""
    return f" (git rewrites it to {got}, through url.<base>.insteadOf)" if got and got != url else ""


def _submodules(source: Source, repo: Path) -> dict[str, str]:
    """Every submodule checked out recursively at its recorded commit, any edit in them undone (their files from
    their objects, untracked files removed), and checked against the recipe's pins."""
    r = _git("submodule", "update", "--init", "--recursive", "--force", cwd=repo)
    if not r.ok:
        bad = re.search(r"(?:clone of|Unable to fetch in submodule path|in submodule path) '([^']+)'", r.stderr + r.stdout)
        path = bad.group(1) if bad else None
        url = _git("config", "-f", ".gitmodules", "--get-regexp", r"submodule\..*\.url", cwd=repo).stdout
        where = f" submodule {path}" if path else " a submodule"
        urls = ", ".join(line.split()[-1] for line in url.splitlines()) or "(see .gitmodules)"
        raise RecipeError(f"{source.origin} at {source.commit[:12]}: fetching{where} failed ({_last(r)}); mirror the "
                          f"submodules' repositories ({urls}) at the commits the source pins.")
    _git("submodule", "foreach", "--recursive", "--quiet", "git clean -q -ffdx", cwd=repo, check=True)
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

def restore(source: Source, repo: Path) -> dict[str, Any]:
    """A copy of source's fetched checkout made its verified commit again by git itself: tracked files from the
    object store (any edit undone), untracked files removed, every submodule likewise at the commit its parent
    records; the commits checked against the recipe's pins. Returns what was verified: the build's provenance."""
    if not _git("reset", "-q", "--hard", source.commit, cwd=repo).ok:
        raise RecipeError(f"the cached checkout of {source.origin} lacks commit {source.commit}: it is damaged; "
                          f"delete {cached(source)} and build again (it is fetched afresh).")
    _git("clean", "-q", "-ffdx", cwd=repo, check=True)
    subs = _submodules(source, repo)
    head = _git("rev-parse", "HEAD", cwd=repo, check=True).stdout.strip()
    if head != source.commit:
        raise RecipeError(f"{source.origin} checked out {head}, not the recipe's {source.commit}.")
    return {"url": source.origin, "commit": head, "submodules": subs}


def _fresh_copy(source: Source, dest: Path) -> dict[str, Any]:
    shutil.copytree(cached(source), dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(VERIFIED))
    return restore(source, dest)


def prepare(recipe: Recipe, tree: Path, out: Any = None) -> dict[str, Any]:
    """Every source fetched (once), copied fresh under tree/ and verified there, the patches applied in order;
    returns the sources' provenance, as verified in this very tree."""
    if tree.exists():
        shutil.rmtree(tree)
    provenance = {}
    for s in recipe.sources:  # in order: a later source's dest may lie inside an earlier one's
        fetch(s, out)
        provenance[s.name] = _fresh_copy(s, tree / s.dest)
    for p in recipe.patches:
        apply(recipe, p, tree / _source(recipe, p.source).dest)
    return provenance


def scratch(recipe: Recipe, source: Source, before: Patch | None = None) -> Path:
    """A checkout of source's commit for the user to remake a patch in: the recipe's patches before `before`
    applied and committed there (so `git diff` shows only the user's change). No build reads it."""
    path = cache_root() / "recipes" / "scratch" / recipe.name / source.name
    if path.exists():
        shutil.rmtree(path)
    _fresh_copy(source, path)
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
        if source.folder is not None:
            fetch(source)
        elif fetched(source) is None:
            unchecked += [p.file.name for p in mine]
            continue
        with tempfile.TemporaryDirectory(prefix="kl-patches-") as tmp:
            copy = Path(tmp) / source.name
            _fresh_copy(source, copy)
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
