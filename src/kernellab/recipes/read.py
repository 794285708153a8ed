"""Finding recipes and reading `recipes/<name>/recipe.toml` into the typed records of kernellab.recipes.model.

Every mistake in a recipe is one RecipeError naming the file and the key, e.g.
`recipes/bt/recipe.toml: sources[0].commit must be a full 40-hex commit (never a branch or a tag), not 'main'`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import ROOT, shown
from ..errors import ConfigError, RecipeError
from ..image.target_table import as_of_date
from .model import (
    BETTER,
    FILE,
    JUDGES,
    PLACEHOLDER,
    REDUCE,
    Claim,
    Experiment,
    Input,
    Metric,
    Package,
    Paper,
    Patch,
    Recipe,
    Requirements,
    Sanity,
    Source,
    Step,
    Variant,
    did_you_mean,
    evaluate,
)
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


# --------------------------------------------------------------------------- reading tables

class _Table:
    """One TOML table and where it is, so that every complaint names file and key."""

    def __init__(self, file: str, where: str, data: Any):
        if not isinstance(data, dict):
            raise RecipeError(f"{file}: {where or 'the file'} must be a table, not {type(data).__name__} {data!r}.")
        self.file, self.where, self.data = file, where, data

    def key(self, k: str) -> str:
        return f"{self.where}.{k}" if self.where else k

    def fail(self, k: str, what: str) -> RecipeError:
        return RecipeError(f"{self.file}: {self.key(k)} {what}.")

    def known(self, *keys: str) -> _Table:
        unknown = sorted(set(self.data) - set(keys))
        if unknown:
            raise RecipeError(f"{self.file}: {self.where or 'the file'} has unknown keys {unknown}; "
                              f"known keys: {sorted(keys)}.")
        return self

    def get(self, k: str, kind: type | tuple[type, ...], default: Any = ..., check: Callable[[Any], bool] | None = None,
            expect: str = "") -> Any:
        if k not in self.data:
            if default is ...:
                raise self.fail(k, f"is missing{f' (expected {expect})' if expect else ''}")
            return default
        v = self.data[k]
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool or (check and not check(v)):
            raise self.fail(k, f"must be {expect or getattr(kind, '__name__', kind)}, not {v!r}")
        return v

    def text(self, k: str, default: Any = ..., expect: str = "a string") -> Any:
        return self.get(k, str, default, lambda v: bool(v.strip()), expect)

    def strings(self, k: str) -> tuple[str, ...]:
        v = self.get(k, list, [], lambda v: all(isinstance(x, str) for x in v), "a list of strings")
        return tuple(v)

    def sub(self, k: str, default: Any = ...) -> _Table:
        return _Table(self.file, self.key(k), self.get(k, dict, {} if default is not ... else ..., expect="a table"))

    def items(self, k: str) -> Iterator[_Table]:
        v = self.get(k, list, [], expect="an array of tables ([[" + self.key(k) + "]])")
        for i, item in enumerate(v):
            yield _Table(self.file, f"{self.key(k)}[{i}]", item)


_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def parse(name: str, folder: Path, data: dict[str, Any]) -> Recipe:
    file = shown(folder / FILE)
    top = _Table(file, "", data).known("paper", "environment", "requirements", "sources", "packages", "patches",
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
    sources = tuple(_source(t, folder) for t in top.items("sources"))
    packages = tuple(_package(t) for t in top.items("packages"))
    if not sources and not packages:
        raise top.fail("sources", "must name at least one repository ([[sources]] with url or path, and commit), or "
                                  "the system as [[packages]] (name and an exact version)")
    _unique(top, "packages", [p.name for p in packages])
    baselines = _baselines(top, folder)
    _unique(top, "sources", [s.name for s in sources])
    patches = tuple(_patch(t, folder, [s.name for s in sources]) for t in top.items("patches"))
    steps = tuple(Step(t.known("name", "run", "cwd").text("name"), t.text("run"), t.text("cwd", "."))
                  for t in top.items("steps"))
    _unique(top, "steps", [s.name for s in steps])
    inputs = tuple(_input(t) for t in top.items("inputs"))
    _unique(top, "inputs", [i.name for i in inputs])
    experiments = tuple(_experiment(t) for t in top.items("experiments"))
    _unique(top, "experiments", [e.name for e in experiments])
    for i, e in enumerate(experiments):
        for wanted in e.inputs:
            if wanted not in {x.name for x in inputs}:
                raise RecipeError(f"{file}: experiments[{i}].inputs names `{wanted}`, which is not an input "
                                  f"([[inputs]]: {', '.join(x.name for x in inputs) or 'none'}).")
    claims = tuple(_claim(t, {e.name: e for e in experiments}) for t in top.items("claims"))
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


_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")


def _package(t: _Table) -> Package:
    t.known("name", "version")
    name = t.text("name", expect="a package name as the index has it, such as \"liger-kernel\"")
    if not _NAME.match(name):
        raise t.fail("name", f"is {name!r}; write a package name such as \"liger-kernel\"")
    version = t.text("version", expect='an exact version such as "0.8.5"')
    if not _VERSION.match(version):
        raise t.fail("version", f"is {version!r}; write one exact version such as \"0.8.5\" (no ranges: the record "
                                "names the wheel it ran)")
    return Package(name, version)


def _baselines(top: _Table, folder: Path) -> dict[str, Path]:
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


def _unique(t: _Table, key: str, values: list[str]) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise t.fail(key, f"names `{seen[0]}` twice; names must be unique")


def _source(t: _Table, folder: Path) -> Source:
    t.known("name", "url", "path", "commit", "dest", "submodules")
    if ("url" in t.data) == ("path" in t.data):
        raise t.fail("url", "or path must say where the source comes from (one of them: a git URL such as "
                            "https://github.com/owner/repo, or a folder beside recipe.toml such as \"paper\")")
    commit = t.get("commit", str, check=lambda v: bool(_COMMIT.match(v)),
                   expect="a full 40-hex commit (never a branch or a tag)")
    subs = t.sub("submodules", {})
    for path, c in subs.data.items():
        if not isinstance(c, str) or not _COMMIT.match(c):
            raise subs.fail(path, f"must be a full 40-hex commit, not {c!r}")
    dest = t.text("dest", ".")
    if Path(dest).is_absolute() or ".." in Path(dest).parts:
        raise t.fail("dest", f"must be a folder under /src such as \"third_party/x\", not {dest!r}")
    local = None
    if "path" in t.data:
        rel = t.text("path", expect="a folder beside recipe.toml, such as \"paper\"")
        local = (folder / rel).resolve()
        if Path(rel).is_absolute() or ".." in Path(rel).parts or not local.is_dir():
            raise t.fail("path", f"must be a folder inside {shown(folder)}, such as \"paper\", not {rel!r}")
        if subs.data:
            raise t.fail("submodules", "belong to a git URL's source; a folder source has none (name a second "
                                       "source with its own dest instead)")
        url, default = "", Path(rel).name
    else:
        url = t.text("url", expect="a git URL such as https://github.com/owner/repo")
        default = url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1]
    name = t.text("name", default)
    if not _NAME.match(name):
        raise t.fail("name", f"must be a plain name (letters, digits, -_.), not {name!r}")
    return Source(name, url, commit, dest, dict(subs.data), local)


def _patch(t: _Table, folder: Path, sources: list[str]) -> Patch:
    t.known("file", "source", "reason")
    rel = t.text("file", expect="a diff file beside recipe.toml, such as \"patches/abi.diff\"")
    path = folder / rel
    if not path.is_file():
        raise t.fail("file", f"names {rel}, which is not a file in {shown(folder)}")
    source = t.text("source", sources[0])
    if source not in sources:
        raise t.fail("source", f"names `{source}`, which is not a source (sources: {', '.join(sources)})")
    return Patch(path, source, t.text("reason", expect="why the patch exists (one sentence)"))


def _input(t: _Table) -> Input:
    t.known("name", "description", "url", "sha256", "size_gb", "prepare", "run", "stand_in", "quick")
    name = t.text("name")
    if not _NAME.match(name):
        raise t.fail("name", f"must be a plain name (letters, digits, -_.), not {name!r}")
    url, run = t.text("url", None, "a URL such as https://host/data.zip"), t.text("run", None)
    if (url is None) == (run is None):
        raise t.fail("url", "or run must say where the data comes from (one of them: a download, or a command "
                            "that writes the data into /out)")
    sha = t.get("sha256", str, "", lambda v: v == "" or bool(re.fullmatch(r"[0-9a-f]{64}", v)),
                "the download's sha256 (64 hex digits), or \"\" to record it at the first download")
    variants = {}
    for key in ("stand_in", "quick"):
        if key in t.data:
            v = t.sub(key).known("run", "description")
            variants[key] = Variant(v.text("run", expect="a command that writes the data into /out"),
                                    v.text("description", expect="what the data is (it is shown with every result)"))
    return Input(name, t.text("description", expect="what the data is"), url, sha,
                 t.get("size_gb", float, None, lambda v: v > 0, "a positive number of GB"),
                 t.text("prepare", None, "a command that turns /download into the files in /out"), run,
                 variants.get("stand_in"), variants.get("quick"))


def _regex(t: _Table, key: str) -> str:
    pattern = t.text(key, expect="a regular expression with one group, such as 'time: ([0-9.]+) ms'")
    try:
        groups = re.compile(pattern, re.MULTILINE).groups
    except re.error as e:
        raise t.fail(key, f"is not a regular expression ({e})") from None
    if groups != 1:
        raise t.fail(key, f"must have exactly one group (the number), not {groups}")
    return pattern


def _grid(t: _Table, key: str) -> dict[str, tuple[Any, ...]]:
    g = t.sub(key, {})
    out = {}
    for k, v in g.data.items():
        values = v if isinstance(v, list) else [v]
        if not values or not all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in values):
            raise g.fail(k, "must be a value or a non-empty list of numbers or strings")
        out[k] = tuple(values)
    return out


def _experiment(t: _Table) -> Experiment:
    t.known("name", "run", "cwd", "grid", "derive", "quick", "repeats", "timeout_s", "metrics", "sanity",
            "description", "inputs", "needs_cuda")
    name = t.text("name")
    grid, quick = _grid(t, "grid"), _grid(t, "quick")
    for k in quick:
        if k not in grid:
            raise t.fail("quick", f"names `{k}`, which is not in the grid ({', '.join(grid) or 'empty'})")
    derive = t.sub("derive", {})
    for k, expr in derive.data.items():
        if not isinstance(expr, str):
            raise derive.fail(k, f"must be an expression over the grid's names such as \"seqlen * 60 // 100\", not {expr!r}")
        try:
            evaluate(expr, {g: v[0] for g, v in grid.items()})
        except RecipeError as e:
            raise derive.fail(k, str(e)) from None
    metrics = tuple(Metric(m.known("name", "regex", "unit", "better", "reduce").text("name"), _regex(m, "regex"),
                           m.text("unit", ""), m.get("better", str, "lower", lambda v: v in BETTER, '"lower" or "higher"'),
                           m.get("reduce", str, "last", lambda v: v in REDUCE, '"last", "min" or "max"'))
                    for m in t.items("metrics"))
    if not metrics:
        raise t.fail("metrics", "must name at least one metric ([[experiments.metrics]] with name and regex)")
    sanity = []
    for s in t.items("sanity"):
        s.known("name", "regex", "max", "min")
        check = Sanity(s.text("name"), _regex(s, "regex"), s.get("max", float, None), s.get("min", float, None))
        if check.max is None and check.min is None:
            raise s.fail("max", "or min must bound the value (a sanity pattern with no bound checks nothing)")
        sanity.append(check)
    return Experiment(name, t.text("run"), t.text("cwd", "."), grid, dict(derive.data), quick,
                      t.get("repeats", int, 1, lambda v: v >= 1, "a count >= 1"),
                      t.get("timeout_s", float, 600.0, lambda v: v > 0, "seconds > 0"), metrics, tuple(sanity),
                      t.text("description", ""), t.strings("inputs"), t.get("needs_cuda", bool, False))


def _claim(t: _Table, experiments: dict[str, Experiment]) -> Claim:
    t.known("name", "experiment", "metric", "case", "value", "unit", "gpu", "where", "judge", "baseline",
            "baseline_value", "tolerance", "setting")
    exp_name = t.text("experiment")
    exp = experiments.get(exp_name)
    if exp is None:
        raise t.fail("experiment", f"names `{exp_name}`, which is not an experiment{did_you_mean(exp_name, list(experiments))}")
    metric = t.text("metric", exp.metrics[0].name)
    if exp.metric(metric) is None:
        raise t.fail("metric", f"names `{metric}`, which experiment {exp_name} does not extract")
    case = dict(t.sub("case", {}).data)
    if case and not any(all(c.get(k) == v for k, v in case.items()) for c in exp.cases()):
        raise t.fail("case", f"{case} is not a case of experiment {exp_name} (grid: {dict(exp.grid)})")
    judge = t.get("judge", str, "ratio", lambda v: v in JUDGES, '"ratio" or "absolute"')
    baseline = t.text("baseline", None)
    baseline_value = t.get("baseline_value", float, None, lambda v: v > 0, "a positive number")
    if judge == "ratio":
        if baseline is None or baseline_value is None:
            raise t.fail("baseline", "and baseline_value are needed to judge a ratio (the baseline experiment of this "
                         "run, and the paper's number for it)")
        base = experiments.get(baseline)
        if base is None:
            raise t.fail("baseline", f"names `{baseline}`, which is not an experiment{did_you_mean(baseline, list(experiments))}")
        if base.metric(metric) is None:
            raise t.fail("baseline", f"experiment {baseline} does not extract metric `{metric}`")
    gpu = t.text("gpu", expect='the paper\'s GPU, such as "A100"')
    if judge == "absolute" and not re.fullmatch(r"[A-Za-z0-9]+", gpu):  # claims.same_gpu_model: one word of the name
        raise t.fail("gpu", f"is {gpu!r}, but an absolute claim is judged where its gpu is one word of the GPU's name "
                            "as nvidia-smi prints it (A100 in NVIDIA A100-SXM4-80GB): write that word, such as A6000 "
                            "for NVIDIA RTX A6000")
    return Claim(t.text("name"), exp_name, metric, case, t.get("value", float, check=lambda v: v > 0,
                                                                  expect="the paper's number (positive)"),
                 t.text("unit", ""), gpu,
                 t.text("where", expect='where the paper prints it, such as "README, table 2"'), judge, baseline,
                 baseline_value, t.get("tolerance", float, 0.1, lambda v: 0 <= v < 1, "a fraction in [0, 1)"),
                 t.text("setting", ""))


def _placeholders(file: str, key: str, text: str, known: set[str]) -> None:
    for m in PLACEHOLDER.finditer(text):
        if m.group(1) not in known:
            raise RecipeError(f"{file}: {key} uses {{{m.group(1)}}}, which is not a known value"
                              f"{did_you_mean(m.group(1), sorted(known))} (known: {', '.join(sorted(known))}).")
