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
from pathlib import Path
from typing import Any, Sequence

from .. import ROOT, gpu, proc
from ..errors import RecipeError
from .claims import Verdict
from .experiments import Case, sanity_value, short_problem

RESULTS = ROOT / "results" / "recipes"
FORMAT = "kernellab-recipe-run/1"


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


def write(folder: Path, *, provenance: dict[str, Any], cases: Sequence[Case], verdicts: Sequence[Verdict],
          units: dict[str, str]) -> None:
    data = {"format": FORMAT, **provenance, "cases": [c.to_dict() for c in cases],
            "claims": [v.to_dict() for v in verdicts]}
    (folder / "run.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    with open(folder / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["experiment", "case", "metric", "value", "unit", "repeats", "sane", "problem"])
        for c in cases:
            rows: dict[str, float | None] = dict(c.metrics) or {"-": None}
            for name, value in rows.items():
                w.writerow([c.experiment, json.dumps(c.params, sort_keys=True), name, value, units.get(name, ""),
                            len(c.runs), c.sane, short_problem(c.problem) if c.problem else ""])
    (folder / "claims.md").write_text(claims_table(verdicts) + "\n")
    (folder / "summary.md").write_text(summary(data) + "\n")
    plot(folder, verdicts)
    plot_metrics(folder, cases, units, stand_in=any(i.get("kind") != "data" for i in (data.get("inputs") or {}).values()))


def load(folder: Path | str) -> dict[str, Any]:
    path = Path(folder) / "run.json"
    if not path.is_file():
        raise RecipeError(f"{folder} is not a recipe run (no run.json); pass a folder under results/recipes/<name>/.")
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise RecipeError(f"{path} is format {data.get('format')!r}, not {FORMAT}; it was written by another kernellab.")
    data["cases"] = [Case.from_dict(c) for c in data["cases"]]
    return dict(data)


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


def summary(data: dict[str, Any]) -> str:
    g = data.get("machine", {}).get("gpu") or {}
    cases: list[dict[str, Any]] = [c if isinstance(c, dict) else c.to_dict() for c in data["cases"]]
    counts: dict[str, int] = {}
    for v in data["claims"]:
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    clocks = data["machine"].get("clocks", {})
    lines = [f"# {data['recipe']}: {data['paper']['title']} ({data['paper']['venue']} {data['paper']['year']})", "",
             f"- GPU: {g['name']} (driver {data['machine'].get('driver')}), SM clock at the start "
             f"{clocks.get('clocks.sm', '?')} (max {clocks.get('clocks.max.sm', '?')})" if g else "- GPU: none (a CPU run)",
             f"- image: `{data['image']['id'][:19]}` (target {data['image']['target']}, recipe hash "
             f"{data['image']['recipe_sha256'][:12]}), kernellab {str(data['machine'].get('kernellab_commit'))[:10]}"
             + (" with uncommitted changes" if data["machine"].get("kernellab_dirty") else "")
             + (f" (working tree {data['machine']['kernellab_tree'][:12]})" if data["machine"].get("kernellab_tree")
                else ""),
             "- sources: " + ", ".join(f"{k} {v['commit'][:10]}" + "".join(f", {p} {c[:10]}" for p, c in
                                                                           v.get("submodules", {}).items())
                                       for k, v in data["sources"].items()),
             "- patches" + (", in order" if isinstance(data.get("patches"), list) else "") + ": " + ("; ".join(f"{p['file']} ({p['reason']})" for p in _patches(data)) or "none"),
             f"- {'quick run (one repeat, the quick grid)' if data.get('quick') else 'full run'}; "
             + _how_far(data, len(cases)) + f", {sum(len(c['runs']) for c in cases)} commands, "
             f"{sum(1 for c in cases if c['problem'])} failed",
             *(f"- input {n}: {'**' + i['kind'].upper() + '**' if i['kind'] != 'data' else 'data'} ({i['description']})"
               for n, i in (data.get("inputs") or {}).items()),
             "- verdicts: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"), "",
             "## Claims", "", claims_table([Verdict(**v) for v in data["claims"]])
             or f"None encoded: {data['paper'].get('no_claims') or 'the recipe has none'}", "", "## Cases", "",
             "| experiment | case | metrics (median) | sanity | runs | problem |", "|---|---|---|---|---|---|"]
    for c in cases:
        metrics = ", ".join(f"{k} {v:g}" for k, v in c["metrics"].items()) or "-"
        sanity = "; ".join(f"{s['name']} {sanity_value(s)} ({'ok' if s['ok'] else 'FAILED'}, {s['bound']})"
                           for s in c["sanity"]) or "-"
        params = " ".join(f"{k}={v}" for k, v in c["params"].items())
        problem = short_problem(c["problem"]) if c["problem"] else "-"
        lines.append(f"| {c['experiment']} | {params} | {metrics} | {sanity} | {len(c['runs'])} | {problem} |")
    if data.get("incomplete"):
        lines += ["", f"**This record is incomplete**: {data['incomplete']}. The cases above are all that ran."]
    return "\n".join(lines)


def salvage(folder: Path, *, recipe: str, cases: Sequence[Case], why: str) -> None:
    """What is left to write when the full record cannot be (the engine gone, the image lost): the cases that
    ran, and why the rest is missing. A run's cases are never lost to a failure after them."""
    data = {"format": FORMAT, "recipe": recipe, "paper": {"title": "?", "venue": "?", "year": "?"},
            "incomplete": why, "image": {"id": "?", "target": "?", "recipe_sha256": "?"}, "machine": {},
            "sources": {}, "patches": [], "cases": [c.to_dict() for c in cases], "claims": []}
    (folder / "run.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (folder / "summary.md").write_text(summary(data) + "\n")


def _patches(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The patches in the order applied (runs before 2026-11-24 kept them as a dict by file name)."""
    patches = data.get("patches") or []
    return [{"file": k, **v} for k, v in patches.items()] if isinstance(patches, dict) else list(patches)


def _how_far(data: dict[str, Any], ran: int) -> str:
    """`11 cases`; for a run that stopped before its end (Ctrl-C, an engine error), `3 of 5 cases` and says so."""
    if not data.get("stopped_early"):
        return f"{ran} cases"
    return f"{ran} of {data.get('planned', '?')} cases (**STOPPED EARLY**, interrupted: the cases that ran are kept)"


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


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Two reproduction runs side by side: every case's metrics and every claim's verdict."""
    rows = ["| experiment | case | metric | old | new | new/old |", "|---|---|---|---|---|---|"]
    before = {c.key: c for c in old["cases"]}
    for c in new["cases"]:
        o = before.get(c.key)
        for name, value in c.metrics.items():
            was = o.metrics.get(name) if o else None
            ratio = f"{value / was:.3f}" if was else "-"
            params = " ".join(f"{k}={v}" for k, v in c.params.items())
            rows.append(f"| {c.experiment} | {params} | {name} | {was if was is not None else '-'} | {value:g} | {ratio} |")
    verdicts = {v["claim"]: v for v in old["claims"]}
    rows += ["", "| claim | old verdict | new verdict | old measured | new measured |", "|---|---|---|---|---|"]
    for v in new["claims"]:
        o = verdicts.get(v["claim"], {})
        rows.append(f"| {v['claim']} | {o.get('verdict', '-')} | {v['verdict']} | {o.get('measured', '-')} | "
                    f"{v['measured'] if v['measured'] is not None else '-'} |")
    return "\n".join(rows)
