"""Pinned sources: fetched with git itself into an object store per URL, verified against the recipe, made fresh
at a destination (kernellab.recipes.trees makes a build's tree of them and applies the patches).

git does the fetching, so a site mirror configured the git way (`url.<mirror>.insteadOf https://github.com/`,
in ~/.gitconfig or GIT_CONFIG_*) works unchanged. Local-path mirrors need submodules fetched over the file
protocol, which git refuses by default; kernellab allows it for these fetches only.

Each URL (a source's, or a submodule's) has one bare repository, its object store, under
$KERNELLAB_CACHE/recipes/objects: a commit is fetched into it only when the store lacks it, so objects are fetched
once per URL and shared by every recipe and commit of that URL. No checkout is kept: every build's tree (and every
scratch or shell copy) is made fresh from the store by git itself, by commit (a new repository at the destination
fetches the commit from the store and checks it out; every submodule likewise at the commit its parent records),
and the commits are checked against the recipe's pins. Objects are named by their contents and git hashes every
object it receives, so an edit in an earlier tree, a moved ref or a damaged object in a store reaches no image:
it is the pinned commit, or an error. Where a patch must be remade, a scratch checkout of the user's own is made
for it.

A folder source (`path = "paper"`: code kept beside the recipe, such as the demo's) is first made into a commit
with a fixed author, date and message, so that its commit is a function of its files alone: the recipe pins that
commit like any other, a changed file is a changed commit (refused until the recipe pins it), and from there it is
checked out and verified as a URL's source is, from the folder store.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import cache_root, proc
from ..errors import RecipeError
from .manifest import Verified
from .model import Source

#: git never asks for a password here: an unreachable repository is an error, not a prompt.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}


def _git(*args: str, cwd: Path | None = None, check: bool = False, timeout: float = 1800) -> proc.Result:
    return proc.run(["git", "-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false", *args],
                    cwd=cwd, env=GIT_ENV, check=check, timeout=timeout)


def _last(r: proc.Result) -> str:
    lines = [x for x in (r.stderr + r.stdout).strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else f"exit code {r.returncode}"


# --------------------------------------------------------------------------- the object stores

def _store_path(url: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", url.split("://", 1)[-1].rstrip("/").removesuffix(".git")).strip("_")
    return cache_root() / "recipes" / "objects" / f"{slug}.git"


def _store(url: str) -> Path:
    """url's object store: a bare repository, made whole or not at all (made aside, then renamed into place)."""
    store = _store_path(url)
    if not (store / "HEAD").is_file():
        store.parent.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(prefix=f".{store.name}-", dir=store.parent))
        try:
            _git("init", "-q", "--bare", str(aside), check=True)
            try:
                aside.rename(store)
            except OSError:
                if not (store / "HEAD").is_file():  # not another process's store, made meanwhile
                    raise
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    return store


def object_store(source: Source) -> Path:
    """The bare repository holding source's objects: its URL's store, or the folder store for a folder source."""
    return _folder_store() if source.folder is not None else _store_path(source.url)


def _held(store: Path, commit: str) -> bool:
    return (store / "HEAD").is_file() and _git("--git-dir", str(store), "cat-file", "-e", f"{commit}^{{commit}}").ok


def _ref(commit: str) -> str:
    return f"refs/kl/{commit}"


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


def _rewritten(url: str) -> str:
    """" through URL2" where git's insteadOf rewrites url (a mirror), else "": what git really tried."""
    r = _git("ls-remote", "--get-url", url, timeout=30)
    got = r.stdout.strip() if r.ok else ""
    return f" (git rewrites it to {got}, through url.<base>.insteadOf)" if got and got != url else ""


@dataclass(frozen=True)
class _Repo:
    """One repository of a source's tree: the source's own (path "") or a submodule's (its path from the top)."""

    path: str
    url: str
    commit: str
    store: Path


def _obtain(source: Source, repo: _Repo, out: Any) -> None:
    """repo's commit fetched into its store (by git, through any insteadOf) unless the store holds it already.
    git writes a fetch's objects as one pack, in place only once whole: an interrupted fetch leaves nothing a
    later run takes for the commit."""
    sub = f"{source.origin} at {source.commit[:12]}: submodule {repo.path}: " if repo.path else ""
    _store(repo.url)
    if not _held(repo.store, repo.commit):
        if out:
            out.write(f"fetching {repo.url} at {repo.commit[:12]}" + (f" (submodule {repo.path})\n" if sub else "\n"))
        git = ("-c", "fetch.unpackLimit=1", "--git-dir", str(repo.store), "fetch", "-q")
        # By commit first (GitHub and mirrors allow it); else every branch and tag, then look.
        r = _git(*git, "--no-tags", repo.url, f"+{repo.commit}:{_ref(repo.commit)}")
        if not r.ok and not _held(repo.store, repo.commit):
            full = _git(*git, "--tags", repo.url, "+refs/heads/*:refs/remotes/origin/*")
            if not full.ok and not _held(repo.store, repo.commit):
                raise RecipeError(f"{sub}cannot fetch {repo.url}{_rewritten(repo.url)} ({_last(full)}); mirror that "
                                  f"repository with commit {repo.commit} and point git at the mirror (`git config "
                                  f"--global url.<mirror>/.insteadOf https://github.com/`, docs/recipes.md).")
            if not _held(repo.store, repo.commit):
                why = "its parent records that commit" if sub else "check the recipe's commit"
                raise RecipeError(f"{sub}{repo.url} has no commit {repo.commit}; {why}, or mirror that commit (the "
                                  f"mirror may hold another).")
    # A ref of its own keeps the commit (git's gc keeps what refs reach), put back should anything have moved it.
    _git("--git-dir", str(repo.store), "update-ref", _ref(repo.commit), repo.commit, check=True)


def _damaged(repo: _Repo, r: proc.Result) -> RecipeError:
    return RecipeError(f"the object store {repo.store} cannot give commit {repo.commit} ({_last(r)}): it is damaged; "
                       f"delete it and build again (it is fetched afresh).")


def _resolve(base: str, url: str) -> str:
    """A submodule's URL as git reads it: `./x` and `../x` are relative to the parent repository's URL."""
    if not url.startswith(("./", "../")):
        return url
    base, sep = base.rstrip("/"), "/"
    while url.startswith(("./", "../")):
        if url.startswith("../"):
            cut = max(base.rfind("/"), base.rfind(":"))
            if cut < 0:
                raise RecipeError(f"cannot resolve the submodule URL {url} against {base}.")
            base, sep = base[:cut], base[cut]
        url = url.split("/", 1)[1]
    return f"{base}{sep}{url}"


def _submodules(source: Source, repo: _Repo) -> list[_Repo]:
    """The submodules repo's commit records: each gitlink's path and commit, its URL from the commit's .gitmodules."""
    def git(*args: str) -> proc.Result:
        return _git("--git-dir", str(repo.store), *args)

    tree = git("ls-tree", "-r", "-z", "--full-tree", repo.commit)
    if not tree.ok:
        raise _damaged(repo, tree)
    links = {}
    for entry in tree.stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        if meta.startswith("160000 commit "):
            links[path] = meta.split()[2]
    if not links:
        return []
    urls: dict[str, str] = {}
    paths: dict[str, str] = {}
    blob = f"{repo.commit}:.gitmodules"
    found = git("config", "--blob", blob, "-z", "--get-regexp", r"^submodule\..*\.(path|url)$")
    for item in found.stdout.split("\0") if found.ok else []:
        key, _, value = item.partition("\n")
        m = re.fullmatch(r"submodule\.(.*)\.(path|url)", key)
        if m:
            (paths if m.group(2) == "path" else urls)[m.group(1)] = value
    by_path = {path.rstrip("/"): urls.get(name, "") for name, path in paths.items()}
    subs = []
    for path, commit in links.items():
        full = f"{repo.path}/{path}" if repo.path else path
        url = by_path.get(path, "")
        if not url:
            raise RecipeError(f"{source.origin} at {source.commit[:12]}: submodule {full} has no URL in its "
                              f"parent's .gitmodules; git cannot fetch it either, so pin another commit.")
        url = _resolve(repo.url, url)
        subs.append(_Repo(full, url, commit, _store_path(url)))
    return subs


def _repos(source: Source, out: Any = None, *, offline: bool = False) -> list[_Repo] | None:
    """The source's repository and, recursively, its submodules' (each after its parent), every commit in its
    store: fetched there where missing, or None where one is missing and offline."""
    folder = source.folder is not None
    if folder and not offline:
        _remote(source)  # checked against its pin, its commit made in the folder store
    top = _Repo("", source.url or source.origin, source.commit, object_store(source))
    repos: list[_Repo] = []

    def walk(repo: _Repo) -> bool:
        if offline or folder and not repo.path:
            if not _held(repo.store, repo.commit):
                return False
        else:
            _obtain(source, repo, out)
        repos.append(repo)
        return all(walk(sub) for sub in _submodules(source, repo))

    return repos if walk(top) else None


def _verified(source: Source, out: Any = None) -> tuple[list[_Repo], Verified]:
    """Source's repositories, each commit in its store, checked against the recipe's pins; and the provenance."""
    repos = _repos(source, out)
    if repos is None:  # a folder source's commit, made just now, is not in the folder store
        raise RecipeError(f"the folder store {_folder_store()} lacks commit {source.commit} just made: it is damaged; "
                          f"delete it and build again.")
    found = {r.path: r.commit for r in repos[1:]}
    for path, want in source.submodules.items():
        if path not in found:
            raise RecipeError(f"{source.origin} at {source.commit[:12]} has no submodule {path} (it has: "
                              f"{', '.join(found) or 'none'}); fix the recipe's submodules table.")
        if found[path] != want:
            raise RecipeError(f"{source.origin}'s submodule {path} is at {found[path]}, not the recipe's {want}; the "
                              f"source's commit pins another, so fix one of the two.")
    return repos, Verified(url=source.origin, commit=source.commit, submodules=found)


def fetched(source: Source) -> bool:
    """Whether the stores hold source's commit and its submodules' (nothing is fetched or checked here)."""
    return _repos(source, offline=True) is not None


def fetch(source: Source, out: Any = None) -> Verified:
    """Source's commit and, recursively, its submodules' in their stores (each fetched only where its store lacks
    it), checked against the recipe's pins; returns what was verified (its url, commit and submodules)."""
    return _verified(source, out)[1]


# --------------------------------------------------------------------------- the build context

def _checkout(repo: _Repo, dest: Path) -> None:
    """dest made repo's commit by git: a new repository there fetches the commit from the store (no alternates:
    the tree stands alone) and checks it out; whatever else dest held is removed."""
    shutil.rmtree(dest / ".git", ignore_errors=True)
    dest.mkdir(parents=True, exist_ok=True)
    _git("init", "-q", str(dest), check=True)
    r = _git("fetch", "-q", "--no-tags", "--no-write-fetch-head", "--depth", "1", str(repo.store), repo.commit, cwd=dest)
    if r.ok:
        r = _git("checkout", "-q", "-f", "--detach", repo.commit, cwd=dest)
    if not r.ok:
        raise _damaged(repo, r)
    _git("clean", "-q", "-ffdx", cwd=dest, check=True)
    head = _git("rev-parse", "HEAD", cwd=dest, check=True).stdout.strip()
    if head != repo.commit:
        raise RecipeError(f"{repo.url} checked out {head}, not {repo.commit}.")


def _fresh(source: Source, dest: Path, out: Any = None) -> Verified:
    """dest made source's verified commit, every submodule at the commit its parent records; returns what was
    verified: the tree's provenance."""
    repos, verified = _verified(source, out)
    for repo in repos:  # a parent before its submodules: its checkout makes their (empty) folders
        _checkout(repo, dest / repo.path)
    return verified
