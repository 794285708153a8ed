"""A recipe's inputs (datasets): which data a run reads, made ready once in a cache that runs and machines share.

Each input is a folder `$KERNELLAB_CACHE/recipes/inputs/<recipe>/<name>/<variant>-<key>/`, written under a
`.partial` name and renamed when complete (so a shared cache never shows half a dataset), with `input.json`
saying what it is. Experiments see it read-only at /inputs/<name>.

- data: downloaded from the input's URL (sha256 and size checked; an input without a sha256 has the first
  download's recorded in `recipes/<name>/locks/inputs.json`, and every later one must match), then turned into
  its files by `prepare`, run in the recipe's image with the download at /download.
- stand-in / quick stand-in: made by a command in the recipe's image; a case that read one judges no claim.

Without --stand-in a run takes the real data, and where it cannot be had (no network, say) the stand-in, saying
so; --quick takes the quick stand-in where there is one.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Sequence, TypedDict, cast

from .. import cache_root, jobs, shown
from ..errors import RecipeError
from ..places import Place
from .model import Experiment, Input, Recipe
from .pins import FOLDER as LOCKS

DATA, STAND_IN, QUICK = "data", "stand-in", "quick stand-in"
MOUNT = "/inputs"


class InputFacts(TypedDict):
    """An input as a run's record keeps it (Ready.to_dict)."""

    kind: str
    description: str
    folder: str
    sha256: str


class Made(TypedDict, total=False):
    """input.json, in an input's folder: what made it (its kind and description; the command, or the URL and the
    download's sha256), its files' sha256 and when it was made."""

    kind: str
    description: str
    command: str
    url: str
    download_sha256: str
    sha256: str
    made: str


class Download(TypedDict):
    """A download in locks/inputs.json, whose recipe gives no sha256 (recorded at the first)."""

    url: str | None
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Ready:
    """One input, ready: which variant, where, and what it is (recorded with every run)."""

    name: str
    kind: str                 # DATA, STAND_IN or QUICK
    folder: Path
    description: str
    sha256: str               # of the files, as input.json has it

    @property
    def mount(self) -> str:
        return f"{self.folder}:{MOUNT}/{self.name}:ro"

    def to_dict(self) -> InputFacts:
        return {"kind": self.kind, "description": self.description, "folder": str(self.folder), "sha256": self.sha256}


def needed(experiments: Sequence[Experiment]) -> list[str]:
    return list(dict.fromkeys(n for e in experiments for n in e.inputs))


def root(recipe: str) -> Path:
    return cache_root() / "recipes" / "inputs" / recipe


def prepare_all(recipe: Recipe, names: Sequence[str], *, place: Place, quick: bool = False,
                stand_in: bool = False, out: IO[str]) -> dict[str, Ready]:
    """Every input named, ready in the cache (made or fetched where missing)."""
    return {n: prepare(recipe, recipe.input(n), place=place, quick=quick, stand_in=stand_in, out=out)
            for n in names}


def prepare(recipe: Recipe, inp: Input, *, place: Place, quick: bool, stand_in: bool,
            out: IO[str]) -> Ready:
    if quick and inp.quick:
        return _made(recipe, inp, QUICK, inp.quick.run, inp.quick.description, place=place, out=out)
    if inp.run is not None:
        return _made(recipe, inp, DATA, inp.run, inp.description, place=place, out=out)
    if stand_in or quick and inp.stand_in and not _cached_data(recipe, inp):
        return _stand_in(recipe, inp, "asked for" if stand_in else "--quick", place=place, out=out)
    try:
        return _fetched(recipe, inp, place=place, out=out)
    except RecipeError as e:
        if inp.stand_in is None:
            raise
        out.write(f"input {inp.name}: {e}\n")
        return _stand_in(recipe, inp, "the data could not be had", place=place, out=out)


def _stand_in(recipe: Recipe, inp: Input, why: str, **kw: Any) -> Ready:
    if inp.stand_in is None:
        raise RecipeError(f"input {inp.name} of recipe {recipe.name} declares no stand-in ({why}); "
                          f"its data comes from {inp.url}.")
    kw["out"].write(f"input {inp.name}: using its STAND-IN ({inp.stand_in.description}; {why}): "
                    f"the run judges no claim that reads it\n")
    return _made(recipe, inp, STAND_IN, inp.stand_in.run, inp.stand_in.description, **kw)


def _key(recipe: Recipe, command: str) -> str:
    """What made data depends on: its command and the recipe's files the command names."""
    h = hashlib.sha256(command.encode())
    for p in sorted(recipe.folder.rglob("*")):
        rel = p.relative_to(recipe.folder).as_posix()
        if p.is_file() and rel in command:
            h.update(rel.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _ready(folder: Path) -> Made | None:
    try:
        return cast(Made, dict(json.loads((folder / "input.json").read_text())))
    except (OSError, ValueError):
        return None


def _files_sha256(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != "input.json":
            h.update(p.relative_to(folder).as_posix().encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _finish(partial: Path, final: Path, about: Made) -> Made:
    about = {**about, "sha256": _files_sha256(partial), "made": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (partial / "input.json").write_text(json.dumps(about, indent=2, sort_keys=True) + "\n")
    try:
        partial.rename(final)
    except OSError:  # another run (or machine) finished it first: theirs is as good
        if _ready(final) is None:
            raise
        shutil.rmtree(partial, ignore_errors=True)
    return _ready(final) or about


def _in_image(command: str, mounts: list[str], *, place: Place, log: Path, what: str) -> None:
    code = place.run(jobs.recipe_input(command, output=log, mounts=tuple(mounts)))
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").rstrip().splitlines()[-8:])
        raise RecipeError(f"{what} failed (exit code {code}); full log: {log}. Last lines:\n{tail}")


def _partial(final: Path) -> Path:
    """An empty folder beside `final` to make it in (what an interrupted run left there is dropped)."""
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    partial.chmod(0o777)  # the command runs as the caller, in a container
    return partial


def _made(recipe: Recipe, inp: Input, kind: str, command: str, description: str, *, place: Place,
          out: IO[str]) -> Ready:
    final = root(recipe.name) / inp.name / f"{kind.replace(' ', '-')}-{_key(recipe, command)}"
    about = _ready(final)
    if about is None:
        partial = _partial(final)
        out.write(f"input {inp.name}: making the {kind} ({description}) ...\n")
        out.flush()
        start = time.monotonic()
        _in_image(command, [f"{partial}:/out"], place=place, log=final.with_name(final.name + ".log"),
                  what=f"making input {inp.name} ({kind}: {command})")
        about = _finish(partial, final, {"kind": kind, "description": description, "command": command})
        out.write(f"input {inp.name}: made in {time.monotonic() - start:.0f} s, {shown(final)}\n")
    return Ready(inp.name, kind, final, description, about["sha256"])


def _cached_data(recipe: Recipe, inp: Input) -> Path | None:
    for folder in sorted((root(recipe.name) / inp.name).glob("data-*")):
        if folder.suffix != ".partial" and _ready(folder):
            return folder
    return None


def recorded(recipe: Recipe) -> dict[str, Download]:
    """locks/inputs.json: the sha256 and size of downloads whose recipe gives none (recorded at the first)."""
    path = recipe.folder / LOCKS / "inputs.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _record(recipe: Recipe, inp: Input, sha: str, size: int) -> Path:
    path = recipe.folder / LOCKS / "inputs.json"
    data = recorded(recipe)
    data[inp.name] = Download(url=inp.url, sha256=sha, bytes=size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _fetched(recipe: Recipe, inp: Input, *, place: Place, out: IO[str]) -> Ready:
    assert inp.url is not None
    known = inp.sha256 or recorded(recipe).get(inp.name, cast(Download, {})).get("sha256", "")
    if known:
        final = root(recipe.name) / inp.name / f"data-{known[:16]}"
        about = _ready(final)
        if about is not None:
            return Ready(inp.name, DATA, final, inp.description, about["sha256"])
    downloads = root(recipe.name) / inp.name / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    file = downloads / inp.url.rstrip("/").rsplit("/", 1)[-1]
    sha, size = _download(inp, file, out)
    if known and sha != known:
        file.unlink(missing_ok=True)
        raise RecipeError(f"the download of input {inp.name} ({inp.url}) has sha256 {sha}, not {known}: the file "
                          f"changed or was damaged; it was deleted.")
    if not known:
        out.write(f"input {inp.name}: recorded sha256 {sha[:16]}... in {shown(_record(recipe, inp, sha, size))} "
                  f"(commit it: later downloads must match)\n")
    final = root(recipe.name) / inp.name / f"data-{sha[:16]}"
    partial = _partial(final)
    if inp.prepare:
        _in_image(inp.prepare, [f"{partial}:/out", f"{downloads}:/download:ro"], place=place,
                  log=final.with_name(final.name + ".log"), what=f"preparing input {inp.name} ({inp.prepare})")
    else:
        shutil.copy2(file, partial / file.name)
    about = _finish(partial, final, {"kind": DATA, "description": inp.description, "url": inp.url,
                                     "download_sha256": sha})
    return Ready(inp.name, DATA, final, inp.description, about["sha256"])


def _download(inp: Input, file: Path, out: IO[str]) -> tuple[str, int]:
    """The URL into file (resumed from nothing: a partial file is fetched again), with progress; (sha256, bytes)."""
    assert inp.url is not None
    partial = file.with_name(file.name + ".partial")
    h, size, last = hashlib.sha256(), 0, 0.0
    try:
        with urllib.request.urlopen(inp.url, timeout=60) as response, open(partial, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0) or (inp.size_gb or 0) * 1e9
            for block in iter(lambda: response.read(1 << 20), b""):
                f.write(block)
                h.update(block)
                size += len(block)
                if time.monotonic() - last > 5:
                    last = time.monotonic()
                    share = f" of {total / 1e9:.2f} GB ({100 * size / total:.0f}%)" if total else ""
                    out.write(f"input {inp.name}: {size / 1e9:.2f} GB{share}\n")
                    out.flush()
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise RecipeError(f"input {inp.name} could not be downloaded from {inp.url} ({getattr(e, 'reason', e)})") from None
    partial.rename(file)
    return h.hexdigest(), size


def mounts(ready: dict[str, Ready], experiment: Experiment) -> tuple[str, ...]:
    return tuple(ready[n].mount for n in experiment.inputs)


def stand_ins(recipe: Recipe, ready: dict[str, Ready]) -> dict[str, str]:
    """experiment -> why its numbers cannot judge a claim (it read a stand-in), for the experiments that did."""
    out = {}
    for e in recipe.experiments:
        made = [r for n in e.inputs if (r := ready.get(n)) and r.kind != DATA]
        if made:
            out[e.name] = "; ".join(f"{r.name} was a {r.kind}: {r.description}" for r in made)
    return out
