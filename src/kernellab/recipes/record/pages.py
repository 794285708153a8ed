"""What a run's record shows, beside run.json: metrics.csv, claims.md, summary.md, claims.png and metrics.png
(write), and two runs side by side (compare, for --compare). Reads the record, never changes it."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

from ... import count
from ...provenance import Checkout, ImageFacts, Machine
from ..claims import Verdict
from ..experiments import Case, short_problem
from ..model import Paper
from .run import Run, save


def write(folder: Path, run: Run) -> None:
    """run.json, metrics.csv, claims.md, summary.md and the plots."""
    save(folder, run)
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
    plot_metrics(folder, run.cases, run.units, stand_in=any(i["kind"] != "data" for i in run.inputs.values()))


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
    g, m, image, checkout = run.machine.gpu, run.machine, run.image, run.checkout
    counts: dict[str, int] = {}
    for v in run.claims:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    paper = run.paper
    lines = [f"# {run.recipe}: {paper.title} ({paper.venue} {paper.year})", "",
             f"- GPU: {g.get('name')} (driver {m.driver}), SM clock at the start "
             f"{m.clocks.get('clocks.sm', '?')} (max {m.clocks.get('clocks.max.sm', '?')})" if g else "- GPU: none (a CPU run)",
             f"- image: `{image.id[:19]}` (target {image.target}, recipe hash "
             f"{str(image.recipe_sha256)[:12]}), kernellab {str(checkout.commit)[:10]}"
             + (" with uncommitted changes" if checkout.dirty else "")
             + (f" (working tree {checkout.tree[:12]})" if checkout.tree else ""),
             "- sources: " + (", ".join(f"{k} {v['commit'][:10]}" + "".join(f", {p} {c[:10]}" for p, c in
                                                                            v.get("submodules", {}).items())
                                        for k, v in run.sources.items()) or "none"),
             *(["- packages: " + ", ".join(f"{n} {w['version']} (wheel sha256 {w['sha256'][:12]})"
                                            for n, w in run.packages.items())] if run.packages else []),
             "- patches, in order: " + ("; ".join(f"{p['file']} ({p['reason']})" for p in run.patches) or "none"),
             f"- {'quick run (one repeat, the quick grid)' if run.quick else 'full run'}; "
             + _how_far(run) + f", {sum(len(c.runs) for c in run.cases)} commands, "
             f"{sum(1 for c in run.cases if c.problem)} failed",
             *(f"- input {n}: {'**' + i['kind'].upper() + '**' if i['kind'] != 'data' else 'data'} ({i['description']})"
               for n, i in run.inputs.items()),
             "- verdicts: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"), "",
             "## Claims", "", claims_table(run.claims)
             or f"None encoded: {paper.no_claims or 'the recipe has none'}", "", "## Cases", "",
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
    run = Run(recipe=recipe, paper=Paper("?", "?", "?", ""), image=ImageFacts("?", "?", "?"),  # type: ignore[arg-type]
              machine=Machine(None), checkout=Checkout(None, None), sources={}, patches=[], cases=list(cases),
              claims=[], incomplete=why)
    save(folder, run)
    (folder / "summary.md").write_text(summary(run) + "\n")


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
