"""The section families of `recipes/<name>/recipe.toml`, one table at a time: [[sources]], [[packages]],
[[patches]], [[inputs]], [[experiments]] (grid, derive, metrics, sanity) and [[claims]], each checked and made a
record of kernellab.recipes.model. Table is a TOML table that knows its file and key, so that every complaint
names both; kernellab.recipes.read puts the sections together and checks the whole recipe.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import shown
from ..errors import RecipeError
from .model import (
    BETTER,
    JUDGES,
    REDUCE,
    Claim,
    Experiment,
    Input,
    Metric,
    Package,
    Patch,
    Sanity,
    Source,
    Variant,
    did_you_mean,
    evaluate,
)


class Table:
    """One TOML table and where it is, so that every complaint names file and key."""

    def __init__(self, file: str, where: str, data: Any):
        if not isinstance(data, dict):
            raise RecipeError(f"{file}: {where or 'the file'} must be a table, not {type(data).__name__} {data!r}.")
        self.file, self.where, self.data = file, where, data

    def key(self, k: str) -> str:
        return f"{self.where}.{k}" if self.where else k

    def fail(self, k: str, what: str) -> RecipeError:
        return RecipeError(f"{self.file}: {self.key(k)} {what}.")

    def known(self, *keys: str) -> Table:
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

    def sub(self, k: str, default: Any = ...) -> Table:
        return Table(self.file, self.key(k), self.get(k, dict, {} if default is not ... else ..., expect="a table"))

    def items(self, k: str) -> Iterator[Table]:
        v = self.get(k, list, [], expect="an array of tables ([[" + self.key(k) + "]])")
        for i, item in enumerate(v):
            yield Table(self.file, f"{self.key(k)}[{i}]", item)


_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")


def read_package(t: Table) -> Package:
    t.known("name", "version")
    name = t.text("name", expect="a package name as the index has it, such as \"liger-kernel\"")
    if not _NAME.match(name):
        raise t.fail("name", f"is {name!r}; write a package name such as \"liger-kernel\"")
    version = t.text("version", expect='an exact version such as "0.8.5"')
    if not _VERSION.match(version):
        raise t.fail("version", f"is {version!r}; write one exact version such as \"0.8.5\" (no ranges: the record "
                                "names the wheel it ran)")
    return Package(name, version)


def read_source(t: Table, folder: Path) -> Source:
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


def read_patch(t: Table, folder: Path, sources: list[str]) -> Patch:
    t.known("file", "source", "reason")
    rel = t.text("file", expect="a diff file beside recipe.toml, such as \"patches/abi.diff\"")
    path = folder / rel
    if not path.is_file():
        raise t.fail("file", f"names {rel}, which is not a file in {shown(folder)}")
    source = t.text("source", sources[0])
    if source not in sources:
        raise t.fail("source", f"names `{source}`, which is not a source (sources: {', '.join(sources)})")
    return Patch(path, source, t.text("reason", expect="why the patch exists (one sentence)"))


def read_input(t: Table) -> Input:
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


def _regex(t: Table, key: str) -> str:
    pattern = t.text(key, expect="a regular expression with one group, such as 'time: ([0-9.]+) ms'")
    try:
        groups = re.compile(pattern, re.MULTILINE).groups
    except re.error as e:
        raise t.fail(key, f"is not a regular expression ({e})") from None
    if groups != 1:
        raise t.fail(key, f"must have exactly one group (the number), not {groups}")
    return pattern


def _grid(t: Table, key: str) -> dict[str, tuple[Any, ...]]:
    g = t.sub(key, {})
    out = {}
    for k, v in g.data.items():
        values = v if isinstance(v, list) else [v]
        if not values or not all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in values):
            raise g.fail(k, "must be a value or a non-empty list of numbers or strings")
        out[k] = tuple(values)
    return out


def read_experiment(t: Table) -> Experiment:
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


def read_claim(t: Table, experiments: dict[str, Experiment]) -> Claim:
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


