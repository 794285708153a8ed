"""Compare two runs row by row: same, faster or slower, judged with the noise of both runs.

A row is slower when the bootstrap interval of new/old median excludes 1 and the change exceeds
max(3%, 2x the noisier run's spread) (stats.compare_samples). An op that was correct and now is
not counts as a regression too. Environment differences are warned about, never hidden.

Two runs on different machines (another GPU, driver or clocks; another host for CPU runs) cannot
be compared in absolute time: a second H100 of the same model is often a few percent slower or
faster at everything. Then each candidate is judged by its time relative to a baseline measured
in the same run (interleaved with it, so both saw the same machine), and the report says so.
A run made with -k is compared only over the ops it selected.

A merged run (several GPU types, kernellab.bench.merge) is compared type by type with another
merged run, or, against a plain run, through the type that ran on the plain run's GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import BenchError
from . import environment, results, sources, stats

REGRESSIONS = ("slower", "now failing")


@dataclass
class Report:
    old_run: str
    new_run: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    environment: list[str] = field(default_factory=list)
    #: What differs between the two machines; non-empty means candidates were timed relative to baselines.
    machine: list[str] = field(default_factory=list)
    #: The new run's -k, and how many rows of the old run it left out.
    select: str | None = None
    left_out: int = 0
    #: Per op of the new run, whether it compiled the same kernel code as the old run (sources.changes).
    sources: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["verdict"] in REGRESSIONS]

    @property
    def relative(self) -> bool:
        return bool(self.machine)


@dataclass
class MergedReport:
    """One Report per GPU type that both sides have; what could not be compared, in notes."""

    old_run: str
    new_run: str
    sections: list[tuple[str, Report]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[dict[str, Any]]:
        """Every type's regressions, each row naming its `gpu_type`."""
        return [dict(r, gpu_type=t) for t, report in self.sections for r in report.regressions]

    @property
    def environment(self) -> list[str]:
        return [f"{t}: {line}" for t, report in self.sections for line in report.environment]


def _key(row: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(op, shape, dtype, pass, impl); key[:4] is the case, whose baselines a candidate is judged against."""
    return results.row_key(row)


def machine_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes two runs' machines differ for timing: GPU, its UUID, driver and clocks (the host without a GPU)."""
    def gpu(env: dict[str, Any]) -> dict[str, Any]:
        return env.get("gpu") or {}

    def clocks(env: dict[str, Any]) -> dict[str, Any]:
        # The reader (nvml or nvidia-smi) is not the clock; the maximum and application clocks are.
        return {k: v for k, v in (gpu(env).get("clocks") or {}).items() if k != "source"}

    pairs = [
        ("GPU", gpu(old).get("name"), gpu(new).get("name")),
        ("GPU UUID", gpu(old).get("uuid"), gpu(new).get("uuid")),
        ("driver", gpu(old).get("driver"), gpu(new).get("driver")),
        *[(k, clocks(old).get(k), clocks(new).get(k)) for k in sorted(set(clocks(old)) | set(clocks(new)))],
        ("clocks locked", (old.get("clock_lock") or {}).get("locked"), (new.get("clock_lock") or {}).get("locked")),
    ]
    if not gpu(old) and not gpu(new):
        pairs.append(("host", old.get("host"), new.get("host")))
    return [f"{label}: {a} -> {b}" for label, a, b in pairs if a != b]


def compare(old: dict[str, Any], new: dict[str, Any]) -> Report | MergedReport:
    """Match rows by (op, shape, dtype, impl) and give each a verdict (per GPU type for merged runs)."""
    if results.is_merged(old) or results.is_merged(new):
        return compare_merged(old, new)
    return compare_plain(old, new)


def compare_plain(old: dict[str, Any], new: dict[str, Any]) -> Report:
    """Match the rows of two plain runs by (op, shape, dtype, impl) and give each a verdict."""
    report = Report(old["run"], new["run"], environment=environment.differences(old["environment"], new["environment"]),
                    machine=machine_differences(old["environment"], new["environment"]), select=new.get("select"))
    if old.get("timer") != new.get("timer"):
        report.environment.insert(0, f"timer: {old.get('timer')} -> {new.get('timer')}")
    report.sources = sources.changes(old, new)
    olds = {_key(r): r for r in old["rows"]}
    news = {_key(r): r for r in new["rows"]}
    # A run made with -k has rows for every op it selected (a skipped or failed op still gets rows),
    # so an old op without a single new row was not selected: it is out of scope, not gone.
    selected = {r["op"] for r in new["rows"]}
    keys = list(news)
    for k in olds:
        if k in news:
            continue
        if report.select and k[0] not in selected:
            report.left_out += 1
        else:
            keys.append(k)
    for key in keys:
        a, b = olds.get(key), news.get(key)
        row: dict[str, Any] = dict(zip(("op", "shape", "dtype", "pass", "impl"), key))
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
        elif report.relative:
            row.update(_relative_row(a, b, olds, news))
        else:
            row.update(_verdict_fields(stats.compare_samples(a["samples_ms"], b["samples_ms"], between=_between(a, b))))
        report.rows.append(row)
    return report


def compare_merged(old: dict[str, Any], new: dict[str, Any]) -> MergedReport:
    """Compare each GPU type both runs have; a plain run is compared with the type that ran on its GPU."""
    notes = []
    if results.is_merged(old) and results.is_merged(new):
        olds, news = old["gpu_types"], new["gpu_types"]
    elif results.is_merged(old):
        gpu_type = matching_type(old, new)
        olds, news = {gpu_type: old["gpu_types"][gpu_type]}, {gpu_type: new}
        notes.append(f"{new['run']} ran on {_gpu_name(new)}: compared with {old['run']}'s {gpu_type} only.")
    else:
        gpu_type = matching_type(new, old)
        olds, news = {gpu_type: old}, {gpu_type: new["gpu_types"][gpu_type]}
        notes.append(f"{old['run']} ran on {_gpu_name(old)}: compared with {new['run']}'s {gpu_type} only.")
    common = [t for t in news if t in olds]
    if not common:
        raise BenchError(f"{old['run']} ({', '.join(olds) or 'no GPU type'}) and {new['run']} "
                         f"({', '.join(news) or 'no GPU type'}) have no GPU type in common; nothing to compare.")
    notes += [f"{t}: only in {old['run']}, not compared." for t in olds if t not in news]
    notes += [f"{t}: only in {new['run']}, not compared." for t in news if t not in olds]
    # A task that left no results shows as `gone` or `new` rows; say why once, per task.
    for doc in (old, new):
        for t, gaps in (doc.get("missing") or {}).items() if results.is_merged(doc) else ():
            notes += [f"{t}/{g['op']}: no results in {doc['run']} ({g['why']})." for g in gaps if t in common]
    report = MergedReport(old["run"], new["run"], notes=notes)
    report.sections = [(t, compare_plain(olds[t], news[t])) for t in common]
    return report


def matching_type(merged: dict[str, Any], plain: dict[str, Any]) -> str:
    """The merged run's GPU type that ran on the plain run's GPU model (no GPU matches a CPU-only type)."""
    name = (plain["environment"].get("gpu") or {}).get("name")
    matches = [t for t, doc in merged["gpu_types"].items() if (doc["environment"].get("gpu") or {}).get("name") == name]
    if not matches:
        types = ", ".join(f"{t} on {_gpu_name(doc)}" for t, doc in merged["gpu_types"].items())
        raise BenchError(f"{plain['run']} ran on {_gpu_name(plain)}, which no GPU type of the merged run "
                         f"{merged['run']} ran on ({types or 'none'}); compare it with a run on the same GPU, "
                         f"or give one type's folder ({merged['run']}/<gpu-type>) to compare with.")
    # Two types on one GPU model would be one partition named twice; the first is as good as the other.
    return matches[0]


def _gpu_name(doc: dict[str, Any]) -> str:
    return (doc["environment"].get("gpu") or {}).get("name") or "no GPU (CPU timing)"


def _between(*rows: dict[str, Any]) -> float:
    """The largest spread between a tiny case's repeated measurements in these rows (0 where none was repeated)."""
    return max(stats.repeat_noise(r.get("repeat_medians_ms") or []) for r in rows)


def _verdict_fields(v: stats.Verdict) -> dict[str, Any]:
    return {"verdict": v.verdict, "change": v.change, "lo": v.ratio.lo - 1.0, "hi": v.ratio.hi - 1.0,
            "threshold": v.threshold}


def _relative_row(a: dict[str, Any], b: dict[str, Any], olds: dict, news: dict) -> dict[str, Any]:
    """The verdict of one timed row when the machines differ: candidates against a same-run baseline."""
    if a.get("role") == "baseline":
        # A baseline is the yardstick: its own change is the machine's, shown but never a verdict.
        v = stats.compare_samples(a["samples_ms"], b["samples_ms"])
        return {"verdict": "reference", "why": f"the candidates' yardstick; {v.change:+.1%} in absolute time"}
    for base in _baselines(a, olds):
        old_base, new_base = olds.get(_key(a)[:4] + (base,)), news.get(_key(a)[:4] + (base,))
        if old_base is not None and new_base is not None and _timed_like(old_base, a) and _timed_like(new_base, a):
            v = compare_relative(a["samples_ms"], old_base["samples_ms"], b["samples_ms"], new_base["samples_ms"],
                                 between=max(math.hypot(_between(a), _between(old_base)),
                                             math.hypot(_between(b), _between(new_base))))
            return {**_verdict_fields(v), "baseline": base, "why": f"time relative to {base}"}
    return {"verdict": "not comparable", "why": "other machine, and no baseline timed in both runs"}


def _timed_like(base: dict[str, Any], row: dict[str, Any]) -> bool:
    return base["status"] == "ok" and bool(base.get("samples_ms")) and base.get("timer") == row.get("timer")


def _baselines(row: dict[str, Any], rows: dict) -> list[str]:
    """The baselines a candidate was timed with, in the op's order (eager first)."""
    names = list(row.get("speedups") or {})
    case = _key(row)[:4]
    names += [k[4] for k, r in rows.items() if k[:4] == case and r.get("role") == "baseline" and k[4] not in names]
    return names


def compare_relative(old_cand: Sequence[float], old_base: Sequence[float], new_cand: Sequence[float],
                     new_base: Sequence[float], *, level: float = 0.95, resamples: int = 2000,
                     seed: int = 0, between: float = 0.0) -> stats.Verdict:
    """Judge (new candidate / new baseline) / (old candidate / old baseline), like stats.compare_samples.

    Above 1 is slower relative to the baseline. The interval is a percentile bootstrap with each of
    the four sample sets resampled on its own (seeded: same samples, same interval). A ratio of two
    timings spreads by both noises in quadrature, so each run's noise is that, and the threshold is
    max(3%, 2x the noisier run's), as for absolute times (or 2x `between`, the spread between a tiny case's repeated
    measurements, where that is larger).
    """
    import numpy as np

    sets = [np.asarray(xs, dtype=float) for xs in (new_cand, new_base, old_cand, old_base)]
    if any(xs.size == 0 for xs in sets):
        raise ValueError("a relative comparison needs samples in all four sets")
    rng = np.random.default_rng(seed)
    nc, nb, oc, ob = (stats.boot_medians(xs, resamples, rng) for xs in sets)
    medians = [float(np.median(xs)) for xs in sets]
    value = (medians[0] / medians[1]) / (medians[2] / medians[3])
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile((nc / nb) / (oc / ob), [alpha, 1.0 - alpha])
    ratio = stats.Ratio(value=value, lo=float(lo), hi=float(hi), level=level)
    noise = max(math.hypot(stats.robust_noise(new_cand), stats.robust_noise(new_base)),
                math.hypot(stats.robust_noise(old_cand), stats.robust_noise(old_base)), between)
    return stats.judge(ratio, noise)




def _median(row: dict[str, Any] | None) -> float | None:
    return ((row or {}).get("stats") or {}).get("median")


def to_markdown(report: Report | MergedReport) -> str:
    """A table of every row's verdict; environment differences and regressions first (per GPU type if merged)."""
    if isinstance(report, MergedReport):
        return _merged_markdown(report)
    return "\n".join([f"# kernellab bench compare: {report.old_run} -> {report.new_run}", "", *_body(report)]) + "\n"


def _merged_markdown(report: MergedReport) -> str:
    n = len(report.regressions)
    counts = ", ".join(f"{t} {len(r.regressions)}" for t, r in report.sections)
    out = [f"# kernellab bench compare: {report.old_run} -> {report.new_run}, per GPU type", "",
           f"{n} significant regression{'s' if n != 1 else ''} over all GPU types ({counts})." if n
           else f"No significant regression in any GPU type ({', '.join(t for t, _ in report.sections)}).", ""]
    if report.notes:
        out += [*[f"- {line}" for line in report.notes], ""]
    for gpu_type, section in report.sections:
        out += [f"## {gpu_type}: {section.old_run} -> {section.new_run}", "", *_body(section), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _body(report: Report) -> list[str]:
    """Everything of one report under its title."""
    out: list[str] = []
    if report.environment:
        out += ["WARNING: the environments differ, so part of any change may be the machine, not the code:",
                *[f"- {d}" for d in report.environment], ""]
    if report.relative:
        out += [relative_line(report), ""]
    if report.sources:
        out += ["Kernel sources, old -> new (what each op compiled):", *[f"- {line}" for line in report.sources], ""]
    if report.left_out:
        out += [f"Only ops matching -k {report.select!r} were run: {report.left_out} row"
                f"{'s' if report.left_out != 1 else ''} of other ops in {report.old_run} left out.", ""]
    n = len(report.regressions)
    rule = ("A change counts when its 95% interval excludes 0 and new/old (slower) or old/new (faster) "
            "exceeds 1 + threshold, where threshold = max(3%, 2x the noisier run's spread).")
    if report.relative:
        rule += (" For a candidate, new/old is (new time / new baseline time) / (old time / old baseline time); "
                 "a baseline's own change is shown as `reference`.")
    out += [f"{n} significant regression{'s' if n != 1 else ''}." if n else "No significant regression.", "",
            rule, ""]
    out += ["| op | shape | dtype | impl | old | new | change [95% CI] | threshold | verdict |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in report.rows:
        change = ""
        if "change" in r:
            change = f"{r['change']:+.1%} [{r['lo']:+.1%}, {r['hi']:+.1%}]"
        threshold = f"{r['threshold']:.1%}" if "threshold" in r else ""
        verdict = r["verdict"] + (f" ({r['why']})" if r.get("why") else "")
        out.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {results.impl_label(r)} | {results.fmt_time(r['old_ms'])} | "
                   f"{results.fmt_time(r['new_ms'])} | {change} | {threshold} | {verdict.replace('|', '/')} |")
    return out


def relative_line(report: Report) -> str:
    """One line: candidates were judged against their baselines, because of what differed."""
    return (f"Compared relative to baselines: the runs were made on different machines ({'; '.join(report.machine)}), "
            "so each candidate is judged by its time / its baseline's time in the same run, not by absolute times.")
