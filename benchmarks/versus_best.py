"""Is the candidate ahead everywhere? Every row of one or more bench runs against its fastest valid baseline.

    python benchmarks/versus_best.py results/h200-norms/layernorm results/h200-norms/rmsnorm [--candidate kernellab]

For each (op, shape, dtype, pass) of the runs (each a folder with results.json, as `invoke bench --out` writes it):
the candidate's median, the fastest baseline that passed its check (eager, torch.compile, a recipe's published
system; one whose output or gradients were wrong is not timed, and the row names it), the speedup over that baseline
with the bench's own 95% bootstrap interval, and both's share of the measured copy bandwidth. A row is **below** when
its whole interval is under 1.0x and *within noise* when the interval holds 1.0x; "(x5)" marks a case the bench
measured five times (a median under 10 us), whose interval spans the five measurements'. Prints a Markdown table and the
count of each, and names every case it could not judge (the candidate failed, no baseline was timed); a case must
come from one run. Cases timed under 10 us (where launch gaps weigh on the events' figures) get a second table: the
candidate's and that best baseline's CUDA-graph figures (`graph_ms`: the L2 flush inside the graph, launch gaps
removed; one median each, no interval). results/h200-norms/README.md's tables are its output.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernellab.bench import results
from kernellab.errors import KernellabError

HEADER = ["| op | rows x cols | dtype | pass | {c} | best baseline | vs best [95%] | {c} % copy | best's % copy |",
          "|---|---|---|---|---|---|---|---|---|"]


def _us(row: dict[str, Any]) -> str:
    return f"{row['stats']['median'] * 1e3:.1f} us"


def _copy(row: dict[str, Any]) -> str:
    return "" if row.get("pct_mem") is None else f"{row['pct_mem']:.0f}%"


def _x(v: float) -> str:
    """A ratio: three decimals near 1.0x, where two would print 1.00 for a row that is below."""
    return f"{v:.3f}" if 0.99 <= v <= 1.01 else f"{v:.2f}"


def _shape(shape: dict[str, Any]) -> str:
    return "x".join(str(v) for v in shape.values()) if set(shape) == {"rows", "cols"} else results.shape_label(shape)


def verdict(interval: dict[str, float]) -> str:
    """'below' (the whole interval under 1.0x), 'noise' (it holds 1.0x) or 'ahead'."""
    return "below" if interval["hi"] < 1.0 else "noise" if interval["lo"] <= 1.0 else "ahead"


def rows_of(docs: list[dict[str, Any]], candidate: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Per case, in the runs' order: the candidate's row, the fastest timed baseline and the baselines that failed
    their check or the run; and a sentence for each case that could not be judged. A case must come from one run."""
    cases: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
    for doc in docs:
        for row in doc["rows"]:
            impls = cases.setdefault(results.row_key(row)[:4], {})
            if row["impl"] in impls:
                raise SystemExit(f"{row['impl']} at {', '.join(results.row_key(row)[:4])} is in two of the runs: "
                                 "give runs of different ops, shapes or dtypes.")
            impls[row["impl"]] = row
    judged, unjudged = [], []
    for case, impls in cases.items():
        mine = impls.get(candidate)
        if mine is None:
            continue
        label = " ".join(case)
        baselines = {name: r for name, r in impls.items() if r.get("role") == "baseline"}
        timed = [r for r in baselines.values() if r.get("status") == "ok" and r.get("stats")]
        failed = [f"{name}: {r.get('status')}" for name, r in baselines.items() if r not in timed]
        if mine.get("status") != "ok":
            unjudged.append(f"{label}: {candidate} {mine.get('status')} ({mine.get('reason') or 'no reason given'})")
        elif not timed:
            unjudged.append(f"{label}: no baseline was timed ({', '.join(failed) or 'none in the run'})")
        else:
            best = min(timed, key=lambda r: r["stats"]["median"])
            speedup = (mine.get("speedups") or {}).get(best["impl"])
            if speedup is None:
                unjudged.append(f"{label}: the run has no speedup of {candidate} over {best['impl']}")
            else:
                judged.append({"row": mine, "best": best, "speedup": speedup, "failed": failed})
    return judged, unjudged


def table(docs: list[dict[str, Any]], candidate: str = "kernellab") -> str:
    lines = [h.format(c=candidate) for h in HEADER]
    counts = {"ahead": 0, "noise": 0, "below": 0}
    judged, unjudged = rows_of(docs, candidate)
    for case in judged:
        row, best, s = case["row"], case["best"], case["speedup"]
        kind = verdict(s)
        counts[kind] += 1
        mark = {"below": " **below**", "noise": " (within noise)", "ahead": ""}[kind]
        if s.get("repeats"):
            mark = f" (x{len(s['repeats'])})" + mark
        failed = f" ({', '.join(case['failed'])})" if case["failed"] else ""
        lines.append(f"| {row['op']} | {_shape(row['shape'])} | {row['dtype']} | {results.pass_of(row)} | {_us(row)} | "
                     f"{best['impl']} {_us(best)}{failed} | {_x(s['value'])}x [{_x(s['lo'])}, {_x(s['hi'])}]{mark} | "
                     f"{_copy(row)} | {_copy(best)} |")
    lines.append("")
    lines.append(f"{sum(counts.values())} rows: {counts['ahead']} ahead of the best baseline (the whole interval above "
                 f"1.0x), {counts['noise']} within noise, {counts['below']} below"
                 + (f"; {len(unjudged)} not judged:" if unjudged else "."))
    lines.extend(f"- {why}" for why in unjudged)
    repeated = sorted({len(c["speedup"]["repeats"]) for c in judged if c["speedup"].get("repeats")})
    if repeated:
        lines.append(f"(x{'/'.join(map(str, repeated))}): a case with a median under 10 us, measured that many times: the median of "
                     "their ratios, the interval from the lowest end of theirs to the highest (docs/bench.md).")
    lines.extend(graph_table(judged, candidate))
    return "\n".join(lines)


def graph_table(judged: list[dict[str, Any]], candidate: str) -> list[str]:
    """The judged cases whose candidate row has a CUDA-graph figure, beside the same best baseline's (or none)."""
    graphed = [case for case in judged if (case["row"].get("graph_ms") or 0) > 0]
    if not graphed:
        return []
    lines = ["", "As CUDA graphs (the cases the bench gave a graph figure, those under 10 us: the flush inside the "
             "graph, launch gaps removed; one median each, no interval):", "",
             f"| op | rows x cols | dtype | pass | {candidate} | best baseline | vs best |", "|---|---|---|---|---|---|---|"]
    for case in graphed:
        row, best = case["row"], case["best"]
        mine, theirs = row["graph_ms"], best.get("graph_ms")
        theirs = theirs if theirs and theirs > 0 else None
        ratio = f"{_x(theirs / mine)}x" if theirs else "-"
        lines.append(f"| {row['op']} | {_shape(row['shape'])} | {row['dtype']} | {results.pass_of(row)} | "
                     f"{mine * 1e3:.2f} us | {best['impl']} {f'{theirs * 1e3:.2f} us' if theirs else '(none)'} | "
                     f"{ratio} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench run folders (or their results.json)")
    ap.add_argument("--candidate", default="kernellab", help="the implementation measured against the baselines")
    args = ap.parse_args(argv)
    try:
        docs = [results.load(run, samples=False) for run in args.runs]  # medians and intervals: no raw samples
    except KernellabError as e:
        raise SystemExit(str(e)) from None
    if any(results.is_merged(doc) for doc in docs):
        raise SystemExit("a merged run (several GPU types) has a table per type: give each type's folder.")
    print(table(docs, args.candidate))


if __name__ == "__main__":
    main()
