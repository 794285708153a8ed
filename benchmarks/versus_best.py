"""Is the candidate ahead everywhere? Every row of one or more bench runs against its fastest valid baseline.

    python benchmarks/versus_best.py results/h200-norms/layernorm results/h200-norms/rmsnorm [--candidate kernellab]

For each (op, shape, dtype, pass) of the runs (each a folder with results.json, as `invoke bench --out` writes it):
the candidate's median, the fastest baseline that passed its check (eager, torch.compile, a recipe's published
system; one whose output or gradients were wrong is not timed, and the row names it), the speedup over that baseline
with the bench's own 95% bootstrap interval, and both's share of the measured copy bandwidth. A row is **below** when
its whole interval is under 1.0x and *within noise* when the interval holds 1.0x. Prints a Markdown table and the
count of each; results/h200-norms/README.md is its output.
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


def rows_of(docs: list[dict[str, Any]], candidate: str) -> list[dict[str, Any]]:
    """Per case, in the runs' order: the candidate's row, the fastest timed baseline, and the baselines left out."""
    cases: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
    for doc in docs:
        for row in doc["rows"]:
            cases.setdefault(results.row_key(row)[:4], {})[row["impl"]] = row
    out = []
    for impls in cases.values():
        mine = impls.get(candidate)
        if mine is None or mine.get("status") != "ok":
            continue
        timed = [r for name, r in impls.items() if name != candidate and r.get("status") == "ok" and r.get("stats")]
        wrong = [name for name, r in impls.items() if name != candidate and r.get("status") == "wrong"]
        if not timed:
            continue
        best = min(timed, key=lambda r: r["stats"]["median"])
        out.append({"row": mine, "best": best, "speedup": mine["speedups"][best["impl"]], "wrong": wrong})
    return out


def table(docs: list[dict[str, Any]], candidate: str = "kernellab") -> str:
    lines = [h.format(c=candidate) for h in HEADER]
    counts = {"ahead": 0, "noise": 0, "below": 0}
    for case in rows_of(docs, candidate):
        row, best, s = case["row"], case["best"], case["speedup"]
        kind = verdict(s)
        counts[kind] += 1
        mark = {"below": " **below**", "noise": " (within noise)", "ahead": ""}[kind]
        wrong = f" ({', '.join(case['wrong'])}: wrong)" if case["wrong"] else ""
        lines.append(f"| {row['op']} | {_shape(row['shape'])} | {row['dtype']} | {results.pass_of(row)} | {_us(row)} | "
                     f"{best['impl']} {_us(best)}{wrong} | {_x(s['value'])}x [{_x(s['lo'])}, {_x(s['hi'])}]{mark} | "
                     f"{_copy(row)} | {_copy(best)} |")
    total = sum(counts.values())
    lines.append("")
    lines.append(f"{total} rows: {counts['ahead']} ahead of the best baseline (the whole interval above 1.0x), "
                 f"{counts['noise']} within noise, {counts['below']} below.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench run folders (or their results.json)")
    ap.add_argument("--candidate", default="kernellab", help="the implementation measured against the baselines")
    args = ap.parse_args(argv)
    try:
        docs = [results.load(run) for run in args.runs]
    except KernellabError as e:
        raise SystemExit(str(e)) from None
    if any(results.is_merged(doc) for doc in docs):
        raise SystemExit("a merged run (several GPU types) has a table per type: give each type's folder.")
    print(table(docs, args.candidate))


if __name__ == "__main__":
    main()
