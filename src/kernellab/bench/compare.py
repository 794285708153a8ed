"""Compare two runs row by row: same, faster or slower, judged with the noise of both runs.

A row is slower when the bootstrap interval of new/old median excludes 1 and the change exceeds
max(3%, 2x the noisier run's spread) (stats.compare_samples). An op that was correct and now is
not counts as a regression too. Environment differences are warned about, never hidden.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import environment, results, stats

REGRESSIONS = ("slower", "now failing")


@dataclass
class Report:
    old_run: str
    new_run: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    environment: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["verdict"] in REGRESSIONS]


def _key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return row["op"], results.shape_label(row["shape"]), row["dtype"], row["impl"]


def compare(old: dict[str, Any], new: dict[str, Any]) -> Report:
    """Match rows by (op, shape, dtype, impl) and give each a verdict."""
    report = Report(old["run"], new["run"], environment=environment.differences(old["environment"], new["environment"]))
    if old.get("timer") != new.get("timer"):
        report.environment.insert(0, f"timer: {old.get('timer')} -> {new.get('timer')}")
    olds = {_key(r): r for r in old["rows"]}
    news = {_key(r): r for r in new["rows"]}
    for key in list(news) + [k for k in olds if k not in news]:
        a, b = olds.get(key), news.get(key)
        row: dict[str, Any] = dict(zip(("op", "shape", "dtype", "impl"), key))
        row.update(old_ms=_median(a), new_ms=_median(b))
        if a is None:
            row["verdict"] = "new"
        elif b is None:
            row["verdict"] = "gone"
        elif a["status"] == "ok" and b["status"] != "ok":
            row.update(verdict="now failing", why=f"{b['status']}: {b.get('reason', '')}")
        elif a["status"] != "ok" and b["status"] == "ok":
            row["verdict"] = "now passing"
        elif a["status"] != "ok":
            row["verdict"] = "not timed"
        elif a.get("timer") != b.get("timer"):
            row["verdict"] = "not comparable"
            row["why"] = f"timer {a.get('timer')} vs {b.get('timer')}"
        else:
            v = stats.compare_samples(a["samples_ms"], b["samples_ms"])
            row.update(verdict=v.verdict, change=v.change, lo=v.ratio.lo - 1.0, hi=v.ratio.hi - 1.0,
                       threshold=v.threshold)
        report.rows.append(row)
    return report


def _median(row: dict[str, Any] | None) -> float | None:
    return ((row or {}).get("stats") or {}).get("median")


def to_markdown(report: Report) -> str:
    """A table of every row's verdict; environment differences and regressions first."""
    out = [f"# kernellab bench compare: {report.old_run} -> {report.new_run}", ""]
    if report.environment:
        out += ["WARNING: the environments differ, so part of any change may be the machine, not the code:",
                *[f"- {d}" for d in report.environment], ""]
    n = len(report.regressions)
    out += [f"{n} significant regression{'s' if n != 1 else ''}." if n else "No significant regression.", "",
            "A change counts when its 95% interval excludes 0 and new/old (slower) or old/new (faster) "
            "exceeds 1 + threshold, where threshold = max(3%, 2x the noisier run's spread).", ""]
    out += ["| op | shape | dtype | impl | old | new | change [95% CI] | threshold | verdict |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in report.rows:
        change = ""
        if "change" in r:
            change = f"{r['change']:+.1%} [{r['lo']:+.1%}, {r['hi']:+.1%}]"
        threshold = f"{r['threshold']:.1%}" if "threshold" in r else ""
        verdict = r["verdict"] + (f" ({r['why']})" if r.get("why") else "")
        out.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {r['impl']} | {results.fmt_time(r['old_ms'])} | "
                   f"{results.fmt_time(r['new_ms'])} | {change} | {threshold} | {verdict.replace('|', '/')} |")
    return "\n".join(out) + "\n"
