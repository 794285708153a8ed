"""One reproduction run's record, `results/recipes/<name>/<run>/`: its one writer and its one reader.

run.json       provenance (image, lock, sources and submodules, patches, GPU, driver, clocks, kernellab commit),
               every command with its exit code, every case's metrics and sanity values, every claim's verdict
metrics.csv    one row per case and metric (median of the repeats)
claims.md      the claims table; summary.md the whole run in one page; claims.png measured against claimed
raw/           every command's output, one file per case and repeat
"""
from __future__ import annotations

import csv
import itertools
import json
import socket
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from .. import ROOT, count, gpu, proc
from ..errors import RecipeError
from .claims import Verdict
from .experiments import Case, short_problem
from .manifest import Manifest
from .model import Recipe

RESULTS = ROOT / "results" / "recipes"
FORMAT = "kernellab-recipe-run/1"


@dataclass
class Run:
    """One reproduction run's record: what ran (cases), what it says (claims), and what it was made of. Written by
    a run here and by a cluster run's merge alike (one writer, write()), read back by compare, export and plots
    (one reader, load())."""

    recipe: str
    paper: dict[str, Any]                 # title, venue, year, url, ...
    image: dict[str, Any]                 # id, tag, target, base_id, base_lock_sha256, recipe_sha256, recipe_manifest_sha256
    machine: dict[str, Any]               # gpu, driver, clocks, host, kernellab_commit/_dirty/_tree (gpu_type: a cluster's)
    sources: dict[str, Any]               # name -> {url, commit, submodules}, as the build verified them
    patches: list[dict[str, Any]]         # in the order applied: file, sha256, reason
    cases: list[Case]
    claims: list[Verdict]
    values: dict[str, Any] = field(default_factory=dict)   # the values the build's commands used
    units: dict[str, str] = field(default_factory=dict)    # metric -> unit
    inputs: dict[str, Any] = field(default_factory=dict)
    packages: dict[str, Any] = field(default_factory=dict)  # the system's packages: name -> {version, sha256 of the wheel}
    quick: bool = False
    select: str | None = None
    planned: int | None = None            # the cases the run set out to run
    stopped_early: bool = False           # every planned case is recorded, failed or not, unless the run stopped
    date: str = ""
    argv: list[str] = field(default_factory=list)
    engine: str | None = None
    incomplete: str | None = None         # why a record could not be written whole (salvage)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"format": FORMAT, **data, "cases": [c.to_dict() for c in self.cases],
                "claims": [v.to_dict() for v in self.claims]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Run:
        if data.get("format") != FORMAT:
            raise RecipeError(f"a record of format {data.get('format')!r}, not {FORMAT}: written by another kernellab.")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known and k not in ("cases", "claims")},
                   cases=[Case.from_dict(c) for c in data.get("cases", [])],
                   claims=[Verdict(**v) for v in data.get("claims", [])])

    @property
    def finished(self) -> bool:
        return not self.stopped_early and not self.incomplete


def new(recipe: Recipe, *, manifest: Manifest | None, image_id: str, machine: dict[str, Any], cases: list[Case],
        verdicts: list[Verdict], image_facts: dict[str, Any] | None = None, **rest: Any) -> Run:
    """A run's record from the recipe, the image's manifest (what it was made of, read from the image itself: its
    target, base, sources, patches and values) and what ran; the one place a record's provenance is put together,
    for a run here and a cluster run alike. image_facts: what only this machine knows (tag, labels)."""
    made = manifest or Manifest(recipe.name, "", None, "", {}, [], {})  # an image made otherwise: none known
    image = {"id": image_id, "target": made.target, "base_id": made.base_image, "recipe_sha256": made.recipe_sha256,
             **(image_facts or {})}
    return Run(recipe=recipe.name, paper=vars(recipe.paper), image=image, machine=machine, sources=made.sources,
               patches=list(made.patches), values=made.values, cases=cases, claims=verdicts,
               units={m.name: m.unit for e in recipe.experiments for m in e.metrics}, **rest)


def run_folder(recipe: str, gpu_name: str | None, root: Path = RESULTS) -> Path:
    """A new folder of this run's own: <date>-<time>-<gpu>, or -2, -3, ... after it when runs start in the same
    second (two -k selections, two GPUs of one model): made atomically, never shared."""
    short = gpu_name.lower().replace("nvidia", "").split()[0] if gpu_name else "nogpu"  # "h100", "a100-sxm4-80gb"
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{short}"
    (root / recipe).mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        folder = root / recipe / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def machine(chosen: gpu.HostGpu | None) -> dict[str, Any]:
    """The GPU a run uses with its driver and clocks (nvidia-smi on the host), the host, the kernellab commit."""
    clocks: dict[str, str] = {}
    smi = gpu.nvidia_smi()
    if chosen and smi:
        fields = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,persistence_mode"
        r = proc.run([smi, f"--query-gpu={fields}", "--format=csv,noheader", "-i", str(chosen.index)], check=False,
                     timeout=60)
        if r.ok:
            clocks = dict(zip(fields.split(","), (v.strip() for v in r.stdout.strip().split(","))))
    commit = proc.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=False, timeout=30)
    dirty = proc.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], check=False, timeout=30)
    changed = bool(dirty.stdout.strip()) if dirty.ok else None
    return {"gpu": chosen.to_dict() if chosen else None, "driver": chosen.driver if chosen else None,
            "clocks": clocks, "host": socket.gethostname(),
            "kernellab_commit": commit.stdout.strip() if commit.ok else None,
            "kernellab_dirty": changed, "kernellab_tree": working_tree() if changed else None}


def working_tree() -> str | None:
    """The git tree of the checkout as it is (every file a commit would take, new ones too): built from a commit
    plus changes, a record names exactly what ran; committing that state gives a commit with this tree."""
    with tempfile.TemporaryDirectory(prefix="kl-tree-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        added = proc.run(["git", "-C", str(ROOT), "add", "-A", "."], env=env, check=False, timeout=120)
        tree = proc.run(["git", "-C", str(ROOT), "write-tree"], env=env, check=False, timeout=60) if added.ok else None
    return tree.stdout.strip() if tree and tree.ok else None


def write(folder: Path, run: Run) -> None:
    """run.json, metrics.csv, claims.md, summary.md and the plots."""
    (folder / "run.json").write_text(json.dumps(run.to_dict(), indent=2, sort_keys=True) + "\n")
    with open(folder / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["experiment", "case", "metric", "value", "unit", "repeats", "sane", "problem"])
        for c in run.cases:
            rows: dict[str, float | None] = dict(c.metrics) or {"-": None}
            for name, value in rows.items():
                w.writerow([c.experiment, json.dumps(c.params, sort_keys=True), name, value, run.units.get(name, ""),
                            len(c.runs), c.sane, short_problem(c.problem) if c.problem else ""])
    (folder / "claims.md").write_text(claims_table(run.claims) + "\n")
    (folder / "summary.md").write_text(summary(run) + "\n")
    plot(folder, run.claims)
    plot_metrics(folder, run.cases, run.units, stand_in=any(i.get("kind") != "data" for i in run.inputs.values()))


def load(folder: Path | str) -> Run:
    path = Path(folder) / "run.json"
    if not path.is_file():
        raise RecipeError(f"{folder} is not a recipe run (no run.json); pass a folder under results/recipes/<name>/.")
    try:
        return Run.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise RecipeError(f"{path} is not a readable recipe record ({type(e).__name__}: {e}).") from None
    except RecipeError as e:
        raise RecipeError(f"{path} is {e}") from None


def claims_table(verdicts: Sequence[Verdict]) -> str:
    if not verdicts:
        return ""
    rows = ["| claim | paper (" + ", ".join(sorted({v.paper_gpu for v in verdicts})) + ") | measured | verdict | why |",
            "|---|---|---|---|---|"]
    for v in verdicts:
        unit = "x" if v.unit == "x" else f" {v.unit}"
        measured = "-" if v.measured is None else f"{v.measured:.3g}{unit}"
        rows.append(f"| {v.claim} | {v.claimed:.3g}{unit} ({v.where}) | {measured} | **{v.verdict}** | {v.why} |")
    return "\n".join(rows)


def summary(run: Run) -> str:
    g = run.machine.get("gpu") or {}
    counts: dict[str, int] = {}
    for v in run.claims:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    clocks = run.machine.get("clocks", {})
    paper = run.paper
    lines = [f"# {run.recipe}: {paper.get('title')} ({paper.get('venue')} {paper.get('year')})", "",
             f"- GPU: {g['name']} (driver {run.machine.get('driver')}), SM clock at the start "
             f"{clocks.get('clocks.sm', '?')} (max {clocks.get('clocks.max.sm', '?')})" if g else "- GPU: none (a CPU run)",
             f"- image: `{str(run.image.get('id'))[:19]}` (target {run.image.get('target')}, recipe hash "
             f"{str(run.image.get('recipe_sha256'))[:12]}), kernellab {str(run.machine.get('kernellab_commit'))[:10]}"
             + (" with uncommitted changes" if run.machine.get("kernellab_dirty") else "")
             + (f" (working tree {run.machine['kernellab_tree'][:12]})" if run.machine.get("kernellab_tree") else ""),
             "- sources: " + (", ".join(f"{k} {v['commit'][:10]}" + "".join(f", {p} {c[:10]}" for p, c in
                                                                            v.get("submodules", {}).items())
                                        for k, v in run.sources.items()) or "none"),
             *(["- packages: " + ", ".join(f"{n} {w['version']} (wheel sha256 {w['sha256'][:12]})"
                                            for n, w in run.packages.items())] if run.packages else []),
             "- patches, in order: " + ("; ".join(f"{p['file']} ({p['reason']})" for p in _patches(run)) or "none"),
             f"- {'quick run (one repeat, the quick grid)' if run.quick else 'full run'}; "
             + _how_far(run) + f", {sum(len(c.runs) for c in run.cases)} commands, "
             f"{sum(1 for c in run.cases if c.problem)} failed",
             *(f"- input {n}: {'**' + i['kind'].upper() + '**' if i['kind'] != 'data' else 'data'} ({i['description']})"
               for n, i in run.inputs.items()),
             "- verdicts: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"), "",
             "## Claims", "", claims_table(run.claims)
             or f"None encoded: {paper.get('no_claims') or 'the recipe has none'}", "", "## Cases", "",
             "| experiment | case | metrics (median) | sanity | runs | problem |", "|---|---|---|---|---|---|"]
    for c in run.cases:
        metrics = ", ".join(f"{k} {v:g}" for k, v in c.metrics.items()) or "-"
        sanity = "; ".join(f"{s.name} {s.shown} ({'ok' if s.ok else 'FAILED'}, {s.bound})"
                           for s in c.sanity) or "-"
        params = " ".join(f"{k}={v}" for k, v in c.params.items())
        problem = short_problem(c.problem) if c.problem else "-"
        lines.append(f"| {c.experiment} | {params} | {metrics} | {sanity} | {len(c.runs)} | {problem} |")
    if run.incomplete:
        lines += ["", f"**This record is incomplete**: {run.incomplete}. The cases above are all that ran."]
    return "\n".join(lines)


def salvage(folder: Path, *, recipe: str, cases: Sequence[Case], why: str) -> None:
    """What is left to write when the full record cannot be (the engine gone, the image lost): the cases that
    ran, and why the rest is missing. A run's cases are never lost to a failure after them."""
    run = Run(recipe=recipe, paper={"title": "?", "venue": "?", "year": "?"}, image={"id": "?", "target": "?",
              "recipe_sha256": "?"}, machine={}, sources={}, patches=[], cases=list(cases), claims=[], incomplete=why)
    (folder / "run.json").write_text(json.dumps(run.to_dict(), indent=2, sort_keys=True) + "\n")
    (folder / "summary.md").write_text(summary(run) + "\n")


def _patches(run: Run) -> list[dict[str, Any]]:
    """The patches in the order applied (runs before 2026-11-24 kept them as a dict by file name)."""
    patches: Any = run.patches or []
    return [{"file": k, **v} for k, v in patches.items()] if isinstance(patches, dict) else list(patches)


def _how_far(run: Run) -> str:
    """`11 cases`; for a run that stopped before its end (Ctrl-C, an engine error), `3 of 5 cases` and says so."""
    if not run.stopped_early:
        return count(len(run.cases), "case")
    return (f"{len(run.cases)} of {run.planned or '?'} cases (**STOPPED EARLY**, interrupted: the cases that ran are "
            "kept)")


def plot(folder: Path, verdicts: Sequence[Verdict]) -> None:
    """claims.png: measured against claimed, one pair of bars per claim (skipped without matplotlib)."""
    judged = [v for v in verdicts if v.measured is not None and v.unit == "x"]
    if not judged:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(judged) + 2), 4))
    xs = range(len(judged))
    ax.bar([x - 0.2 for x in xs], [v.claimed for v in judged], 0.4, label="paper (its GPU)", color="#999999")
    colors = {"reproduced": "#2a9d3f", "within tolerance": "#e0a030", "not reproduced": "#c0392b"}
    ax.bar([x + 0.2 for x in xs], [v.measured or 0 for v in judged], 0.4, label="this run",
           color=[colors.get(v.verdict, "#555555") for v in judged])
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(list(xs), [v.claim for v in judged], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over the baseline (x)")
    ax.set_title("claimed vs measured (bar colour: verdict)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "claims.png", dpi=110)
    plt.close(fig)


def plot_metrics(folder: Path, cases: Sequence[Case], units: dict[str, str], *, stand_in: bool = False) -> None:
    """metrics.png: each metric of each experiment whose cases vary one number (a sweep), against that number."""
    series: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for c in cases:
        numeric = {k: v for k, v in c.params.items() if isinstance(v, (int, float))}
        if len(c.params) != 1 or len(numeric) != 1:
            continue
        (key, x), = numeric.items()
        for name, value in c.metrics.items():
            series.setdefault((c.experiment, key, name), []).append((x, value))
    series = {k: sorted(v) for k, v in series.items() if len(v) > 1}
    if not series:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.6), squeeze=False)
    for ax, ((exp, key, name), points) in zip(axes[0], series.items()):
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(key)
        ax.set_ylabel(f"{name} ({units.get(name, '')})")
        ax.set_title(exp, fontsize=10)
    if stand_in:
        fig.suptitle("on STAND-IN data (generated, not the paper's): the shape of the work, not its numbers",
                     fontsize=9, color="#c0392b")
    fig.tight_layout()
    fig.savefig(folder / "metrics.png", dpi=110)
    plt.close(fig)


def compare(old: Run, new: Run) -> str:
    """Two reproduction runs side by side: every case's metrics and every claim's verdict."""
    rows = ["| experiment | case | metric | old | new | new/old |", "|---|---|---|---|---|---|"]
    before = {c.key: c for c in old.cases}
    for c in new.cases:
        o = before.get(c.key)
        for name, value in c.metrics.items():
            was = o.metrics.get(name) if o else None
            ratio = f"{value / was:.3f}" if was else "-"
            params = " ".join(f"{k}={v}" for k, v in c.params.items())
            rows.append(f"| {c.experiment} | {params} | {name} | {was if was is not None else '-'} | {value:g} | {ratio} |")
    verdicts = {v.claim: v for v in old.claims}
    rows += ["", "| claim | old verdict | new verdict | old measured | new measured |", "|---|---|---|---|---|"]
    for v in new.claims:
        earlier = verdicts.get(v.claim)
        rows.append(f"| {v.claim} | {earlier.verdict if earlier else '-'} | {v.verdict} | "
                    f"{earlier.measured if earlier and earlier.measured is not None else '-'} | "
                    f"{v.measured if v.measured is not None else '-'} |")
    return "\n".join(rows)
