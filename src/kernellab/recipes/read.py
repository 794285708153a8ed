"""Finding recipes and reading `recipes/<name>/recipe.toml` into the typed records of kernellab.recipes.model:
the whole recipe ([paper], [environment], [requirements], [[steps]], [baselines]) and the checks across its
sections (unique names, the inputs an experiment names, a claim or why there is none, {name} placeholders).
Each table of a section family ([[sources]], [[experiments]], ...) is read by kernellab.recipes.sections.

Every mistake in a recipe is one RecipeError naming the file and the key, e.g.
`recipes/bt/recipe.toml: sources[0].commit must be a full 40-hex commit (never a branch or a tag), not 'main'`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import ROOT, shown
from ..errors import ConfigError, RecipeError
from ..image.target_table import as_of_date
from . import sections
from .model import FILE, PLACEHOLDER, Paper, Recipe, Requirements, Step, did_you_mean
from .sections import Table
from .values import KNOWN

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

RECIPES = ROOT / "recipes"


# --------------------------------------------------------------------------- finding recipes

def names(root: Path = RECIPES) -> list[str]:
    return sorted(p.parent.name for p in root.glob(f"*/{FILE}")) if root.is_dir() else []


def find(name: str, root: Path = RECIPES) -> Path:
    """The folder of recipe NAME (or a path to a recipe folder); RecipeError with the closest names."""
    path = Path(name)
    if (path / FILE).is_file():
        return path
    if (root / name / FILE).is_file():
        return root / name
    known = names(root)
    listing = f" (recipes: {', '.join(known)})" if known else f" ({root} holds none)"
    raise RecipeError(f"no recipe named `{name}`{did_you_mean(name, known)}{listing}.")


def load(name: str, root: Path = RECIPES) -> Recipe:
    """Recipe NAME (a folder under recipes/, or a path to a recipe folder)."""
    folder = find(name, root)
    return load_folder(folder, folder.name)


def load_folder(folder: Path, name: str) -> Recipe:
    """The recipe in folder, under the name it has (a built image keeps its recipe at /recipe)."""
    file = folder / FILE
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{shown(file)} is not valid TOML: {e}.") from None
    return parse(name, folder, data)


def parse(name: str, folder: Path, data: dict[str, Any]) -> Recipe:
    file = shown(folder / FILE)
    top = Table(file, "", data).known("paper", "environment", "requirements", "sources", "packages", "patches",
                                      "steps", "inputs", "experiments", "claims", "baselines")
    p = top.sub("paper").known("title", "venue", "year", "link", "no_claims")
    paper = Paper(p.text("title"), p.text("venue"), p.get("year", int, expect="a year such as 2023"),
                  p.text("link", expect="a URL"), p.text("no_claims", ""))
    env = top.sub("environment").known("target", "pip", "as_of")
    try:
        as_of = as_of_date(env.data["as_of"], f"{file}: environment") if "as_of" in env.data else None
    except ConfigError as bad:
        raise RecipeError(str(bad)) from None
    target, table = None, None
    if isinstance(env.data.get("target"), dict):
        table = env.sub("target").data
    else:
        target = env.text("target", expect='a named target such as "cu124-debian", or an inline table')
    r = top.sub("requirements", {}).known("archs", "gpu_memory_gb", "ram_gb", "disk_gb", "note", "cpu", "min_cuda")
    archs = r.strings("archs")
    for a in archs:
        if not re.match(r"^\d+\.\d+$", a):
            raise r.fail("archs", f'lists {a!r}; write compute capabilities such as "8.0"')
    gb = {k: r.get(k, float, None, lambda v: v > 0, "a positive number of GB")
          for k in ("gpu_memory_gb", "ram_gb", "disk_gb")}
    min_cuda = r.get("min_cuda", str, None, lambda v: bool(re.fullmatch(r"\d+\.\d+", v)),
                     'a CUDA version such as "12.0" (the oldest the code builds with)')
    requirements = Requirements(archs, note=r.text("note", ""), cpu=r.get("cpu", bool, False), min_cuda=min_cuda, **gb)
    sources = tuple(sections.read_source(t, folder) for t in top.items("sources"))
    packages = tuple(sections.read_package(t) for t in top.items("packages"))
    if not sources and not packages:
        raise top.fail("sources", "must name at least one repository ([[sources]] with url or path, and commit), or "
                                  "the system as [[packages]] (name and an exact version)")
    _unique(top, "packages", [p.name for p in packages])
    baselines = _baselines(top, folder)
    _unique(top, "sources", [s.name for s in sources])
    patches = tuple(sections.read_patch(t, folder, [s.name for s in sources]) for t in top.items("patches"))
    steps = tuple(Step(t.known("name", "run", "cwd").text("name"), t.text("run"), t.text("cwd", "."))
                  for t in top.items("steps"))
    _unique(top, "steps", [s.name for s in steps])
    inputs = tuple(sections.read_input(t) for t in top.items("inputs"))
    _unique(top, "inputs", [i.name for i in inputs])
    experiments = tuple(sections.read_experiment(t) for t in top.items("experiments"))
    _unique(top, "experiments", [e.name for e in experiments])
    for i, e in enumerate(experiments):
        for wanted in e.inputs:
            if wanted not in {x.name for x in inputs}:
                raise RecipeError(f"{file}: experiments[{i}].inputs names `{wanted}`, which is not an input "
                                  f"([[inputs]]: {', '.join(x.name for x in inputs) or 'none'}).")
    claims = tuple(sections.read_claim(t, {e.name: e for e in experiments}) for t in top.items("claims"))
    _unique(top, "claims", [c.name for c in claims])
    if not claims and not paper.no_claims:
        raise top.fail("claims", "are missing: a recipe judges the paper's claims ([[claims]]), or says why it has "
                                 "none yet ([paper] no_claims = \"...\")")
    for i, s in enumerate(steps):
        _placeholders(file, f"steps[{i}].run", s.run, set(KNOWN))
    for i, e in enumerate(experiments):
        _placeholders(file, f"experiments[{i}].run", e.run, set(KNOWN) | set(e.grid) | set(e.derive))
    return Recipe(name, folder, paper, target, table, env.strings("pip"), requirements, sources, patches, steps,
                  experiments, claims, inputs, as_of, packages, baselines)


def _baselines(top: Table, folder: Path) -> dict[str, Path]:
    """[baselines]: op (a folder of kernels/) -> the recipe's adapter file that calls the system with the op's inputs."""
    table = top.sub("baselines", {})
    found = {}
    for op, rel in table.data.items():
        if not isinstance(rel, str) or not rel.endswith(".py"):
            raise table.fail(op, 'names the adapter: a .py file of the recipe, such as "baselines/layernorm.py"')
        path = (folder / rel).resolve()
        if not path.is_file() or not path.is_relative_to(folder.resolve()):
            raise table.fail(op, f"names {rel}, which is not a file of the recipe's folder")
        found[op] = path
    return found


def _unique(t: Table, key: str, values: list[str]) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise t.fail(key, f"names `{seen[0]}` twice; names must be unique")


def _placeholders(file: str, key: str, text: str, known: set[str]) -> None:
    for m in PLACEHOLDER.finditer(text):
        if m.group(1) not in known:
            raise RecipeError(f"{file}: {key} uses {{{m.group(1)}}}, which is not a known value"
                              f"{did_you_mean(m.group(1), sorted(known))} (known: {', '.join(sorted(known))}).")
