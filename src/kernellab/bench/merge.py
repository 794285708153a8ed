"""Merge a sweep across GPU types: one bench run per op per GPU type into one run per type, and one
table, merged.json and plot for the whole sweep.

A sweep (one task per op per GPU type, e.g. under Slurm) leaves an ordinary bench run folder per
task: results/<run>/<gpu-type>/<op>/. merge_gpu_type joins a type's op folders into one schema-1
run in <run>/<gpu-type>/, so `--compare` and results.load take it like any run; merge_run puts
the types side by side in <run>/summary.md, <run>/merged.json and <run>/cross_gpu.png. A task
that failed or timed out leaves no results.json: merging goes on with what is there and lists
what is missing.

`python -m kernellab.bench merge RUN [--gpu-types a,b]` runs merge_run.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ..errors import BenchError, KernellabError
from . import report, results, sources

#: What may differ between the parts of one GPU type (each task can land on another node):
#: a label and the field's path in the environment stamp. GPU clocks are added per key.
FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPU", ("gpu", "name")), ("GPU UUID", ("gpu", "uuid")), ("driver", ("gpu", "driver")), ("host", ("host",)),
    ("torch", ("torch",)), ("CUDA runtime", ("cuda_runtime",)), ("triton", ("triton",)), ("image", ("image",)),
    ("commit", ("git", "commit")),
)
SUMMARY, PLOT = "summary.md", "cross_gpu.png"

Part = tuple[str, dict[str, Any]]  # (op folder name, that task's results doc)
_NO_MISSING: Mapping[str, Sequence[str]] = MappingProxyType({})


def merge_gpu_type(folder: Path) -> dict[str, Any]:
    """Merge every <folder>/<op>/results.json into one run, written into folder; return its doc.

    Writes results.json, results.csv, summary.md and (where matplotlib is installed) the plots.
    The doc is an ordinary schema-1 run plus `gpu_type`, `parts` (one entry per op's run),
    `missing` (op folders without results: [{"op", "why"}]) and `merge_warnings`.
    """
    parts, missing = _scan(folder)
    if not parts:
        raise BenchError(f"no bench results in {folder}: no <op>/results.json under it"
                         + (f" ({len(missing)} op folders without one)" if missing else "") + "; nothing to merge.")
    return _write_type(folder, parts, missing)


def _write_type(folder: Path, parts: Sequence[Part], missing: list[dict[str, str]]) -> dict[str, Any]:
    doc = combine(f"{folder.parent.name}/{folder.name}", parts)
    doc.update(gpu_type=folder.name, missing=missing)
    report.write(folder, doc)
    return doc


def _scan(folder: Path) -> tuple[list[Part], list[dict[str, str]]]:
    """Each <op>/ folder of a GPU type: its run's results, or why it has none."""
    parts: list[Part] = []
    missing: list[dict[str, str]] = []
    if not folder.is_dir():
        return parts, missing
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        file = sub / "results.json"
        if not file.is_file():
            missing.append({"op": sub.name, "why": f"{folder.name}/{sub.name}/ has no results.json: "
                                                   "the task failed or timed out"})
            continue
        try:
            parts.append((sub.name, results.load(file)))
        except BenchError as e:  # one damaged part must not hide the others
            missing.append({"op": sub.name, "why": str(e)})
    return parts, missing


def combine(name: str, parts: Sequence[Part]) -> dict[str, Any]:
    """One schema-1 run named `name` from one run per op: rows in op order, one environment stamp.

    Where the parts' environments differ (another node, driver, image), the merged stamp holds the
    values with their ops, e.g. "GPU-1 (matmul); GPU-2 (softmax)", and a warning says so: --compare
    then sees another assignment of ops to machines as another machine.
    """
    first = parts[0][1]
    env, differ = merged_environment([(op, doc["environment"]) for op, doc in parts])
    merge_warnings = [f"the parts ran with different {label}: {shown}" for label, shown in differ]
    timers = [(op, doc.get("timer")) for op, doc in parts]
    if len({t for _, t in timers}) > 1:
        merge_warnings.append(f"the parts used different timers: {_by_value(timers)}")
    if len({_canon(doc.get("settings")) for _, doc in parts}) > 1:
        merge_warnings.append("the parts were timed with different settings (quick and full runs mixed?); "
                              "see each part's results.json")
    # A part made with `-k add` may also hold rows of another op (vector_add): keep each row once,
    # from the part named after its op where there is one.
    owned = {_key(r) for op, doc in parts for r in doc["rows"] if r["op"] == op}
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, ...]] = set()
    dropped = 0
    for op, doc in parts:
        for row in doc["rows"]:
            key = _key(row)
            if key in seen or (row["op"] != op and key in owned):
                dropped += 1
                continue
            seen.add(key)
            rows.append(row)
    if dropped:
        merge_warnings.append(f"{dropped} rows measured by more than one part were kept once, "
                              "from the part named after their op")
    part_warnings = [w for _, doc in parts for w in doc.get("warnings") or []]
    selects = {doc.get("select") for _, doc in parts}
    return {
        "schema": results.SCHEMA, "run": name,
        "started": min((d["started"] for _, d in parts if d.get("started")), default=None),
        "finished": max((d["finished"] for _, d in parts if d.get("finished")), default=None),
        "argv": None, "select": selects.pop() if len(selects) == 1 else None,
        "quick": any(d.get("quick") for _, d in parts), "timer": first.get("timer"), "settings": first["settings"],
        "environment": env,
        # Each row's % peak was computed against its own part's peaks; these are the first part's, for the header.
        "peaks": next((d["peaks"] for _, d in parts if d.get("peaks")), None),
        "datasheet": next((d["datasheet"] for _, d in parts if d.get("datasheet")), None),
        "rows": rows,
        "warnings": list(dict.fromkeys(merge_warnings + part_warnings)),  # each once, in order
        "merge_warnings": merge_warnings, "parts": [_part_entry(op, doc) for op, doc in parts],
        "sources": sources.merged(parts),  # each op's kernel code, from the part named after it
    }


def _part_entry(op: str, doc: dict[str, Any]) -> dict[str, Any]:
    env = doc["environment"]
    gpu = env.get("gpu") or {}
    return {"op": op, "path": f"{op}/results.json", "run": doc.get("run"), "started": doc.get("started"),
            "finished": doc.get("finished"), "host": env.get("host"), "gpu": gpu.get("name"),
            "gpu_uuid": gpu.get("uuid"), "driver": gpu.get("driver"), "rows": len(doc["rows"])}


def merged_environment(envs: Sequence[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The first part's environment, with each field that differs between parts shown per op; and those fields."""
    env = copy.deepcopy(envs[0][1])
    clock_keys = sorted({k for _, e in envs for k in ((e.get("gpu") or {}).get("clocks") or {}) if k != "source"})
    differ = []
    for label, path in [*FIELDS, *[(f"GPU clock {k}", ("gpu", "clocks", k)) for k in clock_keys]]:
        values = [(op, _get(e, path)) for op, e in envs]
        if len({_canon(v) for _, v in values}) > 1:
            shown = _by_value(values)
            _set(env, path, shown)
            differ.append((label, shown))
    return env, differ


def _get(d: Any, path: Sequence[str]) -> Any:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return d


def _set(d: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for key in path[:-1]:
        d = d.get(key)  # type: ignore[assignment]
        if not isinstance(d, dict):
            return  # e.g. a GPU field where the first part had no GPU: the warning says it all
    d[path[-1]] = value


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _short(value: Any) -> str:
    if isinstance(value, dict):  # an image stamp: its lock hash names it
        return str(value.get("lock_sha256") or value.get("id") or "unknown")[:12]
    return str(value)


def _by_value(values: Sequence[tuple[str, Any]]) -> str:
    """"a (op1, op2); b (op3)": each value once, with the ops that had it."""
    groups: dict[str, list[str]] = {}
    for op, value in values:
        groups.setdefault(_short(value), []).append(op)
    return "; ".join(f"{value} ({', '.join(ops)})" for value, ops in groups.items())


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return results.row_key(row)  # (op, shape, dtype, pass, impl)


# --- the whole run ----------------------------------------------------------------------------

def gpu_types_in(run: Path) -> list[str]:
    """The run's subfolders that hold at least one <op>/results.json, sorted."""
    if not run.is_dir():
        return []
    return sorted(d.name for d in run.iterdir() if d.is_dir() and any(d.glob("*/results.json")))


def merge_run(run: Path, gpu_types: Sequence[str], *,
              missing: Mapping[str, Sequence[str]] = _NO_MISSING) -> Path:
    """Merge each GPU type of a sweep, then write <run>/summary.md, merged.json and cross_gpu.png.

    `missing` names the tasks the caller knows produced no results (GPU type -> ops); op folders
    without a results.json, and ops that other types have, are found missing too (a type not in
    gpu_types is not looked at, nor its entry in `missing`). Returns the
    path of summary.md. Raises BenchError when no GPU type has any results.
    """
    if not run.is_dir():
        raise BenchError(f"{run} is not a folder; give a sweep's run folder (results/<run>/).")
    scans = {t: _scan(run / t) for t in gpu_types}
    if not any(parts for parts, _ in scans.values()):
        raise BenchError(f"no bench results in {run} for GPU type(s) {', '.join(gpu_types) or '(none given)'}: "
                         "no <gpu-type>/<op>/results.json; nothing to merge.")
    merged_ops = {t: [op for op, _ in parts] for t, (parts, _) in scans.items()}
    gaps = {t: list(found) for t, (_, found) in scans.items()}
    all_ops = sorted({op for ops in merged_ops.values() for op in ops} | {g["op"] for gs in gaps.values() for g in gs}
                     | {op for t in gpu_types for op in missing.get(t, ())})
    warnings = []
    for gpu_type in gpu_types:
        known = {g["op"] for g in gaps[gpu_type]}
        given = set(missing.get(gpu_type, ()))
        for op in all_ops:
            if op in merged_ops[gpu_type]:
                if op in given:
                    warnings.append(f"{gpu_type}/{op}: reported missing, but its results.json is there and was merged")
            elif op not in known:
                why = "the task produced no results" if op in given else f"no {gpu_type}/{op}/ folder"
                gaps[gpu_type].append({"op": op, "why": why})
        gaps[gpu_type].sort(key=lambda g: g["op"])
    docs = {t: _write_type(run / t, parts, gaps[t]) for t, (parts, _) in scans.items() if parts}
    warnings = [f"{t}: {w}" for t, doc in docs.items() for w in doc["merge_warnings"]] + warnings
    plot: str | None = PLOT
    try:
        from . import plots

        plots.cross_gpu(docs, run / PLOT, title=f"kernellab bench {run.name}: speedup per GPU type")
    except ImportError as e:
        plot = None
        warnings.append(f"no cross-GPU plot: {e.name} is not installed")
    (run / SUMMARY).write_text(to_markdown(run.name, gpu_types, docs, gaps, warnings, plot))
    manifest = {
        "schema": results.SCHEMA, "kind": results.MERGED, "run": run.name,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu_types": {t: f"{t}/results.json" for t in docs},
        "missing": {t: gaps[t] for t in gpu_types if gaps[t]},
        "summary": SUMMARY, "plot": plot, "warnings": warnings,
    }
    (run / results.MERGED_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return run / SUMMARY


def to_markdown(run: str, gpu_types: Sequence[str], docs: Mapping[str, dict[str, Any]],
                gaps: Mapping[str, Sequence[dict[str, str]]], warnings: Sequence[str], plot: str | None) -> str:
    """The run's summary.md: each GPU type's machine, one table with a column group per type, what is missing."""
    bases: list[str] = []
    for doc in docs.values():
        bases += [b for b in results.baseline_names(doc) if b not in bases]
    out = [f"# kernellab bench: {run} across GPU types", ""]
    for gpu_type in gpu_types:
        merged = docs.get(gpu_type)
        n = len(merged["parts"]) if merged else 0
        out.append(f"- {gpu_type}: " + (_machine(merged) + f"; {n} op{'s' if n != 1 else ''} ({gpu_type}/{SUMMARY})"
                                        if merged else "no results"))
    out += ["- median: the implementation's median time on that GPU; % peak: share of that GPU's measured copy "
            "bandwidth or GEMM rate, whichever binds; vs B: B's median / the candidate's on the same GPU "
            f"(95% intervals in each type's {SUMMARY})", ""]
    types = [t for t in gpu_types if t in docs]
    cols = ["op", "shape", "dtype", "impl",
            *[f"{t} {c}" for t in types for c in ("median", "% peak", *[f"vs {b}" for b in bases])], "notes"]
    out += ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lookup = {t: {_key(r): r for r in docs[t]["rows"]} for t in types}
    missing_ops = {t: {g["op"] for g in gaps.get(t, ())} for t in types}
    for key in _table_keys(docs, types):
        found = {t: lookup[t].get(key) or lookup[t].get(key[:4] + ("all",)) for t in types}
        role = next((r["role"] for r in found.values() if r and r["impl"] == key[4]), "")
        cells = [*key[:3], results.impl_label(dict(impl=key[4], **{"pass": key[3]})) + (" (baseline)" if role == "baseline" else "")]
        for t in types:
            cells += _cells(found[t], key[0] in missing_ops[t], bases)
        cells.append("; ".join(f"{t}: {results.notes(r)}" for t, r in found.items() if r and results.notes(r)))
        out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    out += ["", "## Missing", ""]
    listed = [f"- {t}/{g['op']}: {g['why']}" for t in gpu_types for g in gaps.get(t, ())]
    out += listed or ["Every task left results."]
    if warnings:
        out += ["", "## Warnings", "", *[f"- {w}" for w in warnings]]
    if plot:
        out += ["", f"![speedup per GPU type]({plot})"]
    return "\n".join(out) + "\n"


def _machine(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    gpu = env.get("gpu")
    where = (f"{gpu.get('name')}, driver {gpu.get('driver') or 'unknown'}" if gpu
             else "no GPU (CPU timing, not comparable with GPU figures)")
    return (f"{where}, host {env.get('host') or 'unknown'}; torch {env.get('torch')}, "
            f"CUDA runtime {env.get('cuda_runtime')}")


def _table_keys(docs: Mapping[str, dict[str, Any]], types: Sequence[str]) -> list[tuple[str, ...]]:
    """Every (op, shape, dtype, impl) of any type, grouped by op; an op's "all" row only where no type has more."""
    keys: list[tuple[str, ...]] = []
    for t in types:
        keys += [k for k in (_key(r) for r in docs[t]["rows"]) if k not in keys]
    cases = {k[:4] for k in keys if k[4] != "all"}
    keys = [k for k in keys if k[4] != "all" or k[:4] not in cases]
    ops = sorted({k[0] for k in keys})
    return sorted(keys, key=lambda k: ops.index(k[0]))  # stable: each op keeps its rows' order


def _cells(row: dict[str, Any] | None, op_missing: bool, bases: Sequence[str]) -> list[str]:
    """One type's median, % peak and speedups for one row; the first cell says why where there are none."""
    blank = [""] * (1 + len(bases))
    if row is None:
        return ["missing task" if op_missing else "no row", *blank]
    if row["status"] != "ok":
        return [row["status"], *blank]
    pct = row.get("pct_peak")
    speedups = row.get("speedups") or {}
    return [results.fmt_time((row.get("stats") or {}).get("median")),
            f"{_num(pct)}% {row.get('bound') or ''}".rstrip() if pct is not None else "",
            *[f"{speedups[b]['value']:.2f}x" if b in speedups else "" for b in bases]]


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kernellab.bench merge RUN [--gpu-types a,b]`: merge a sweep and print its summary."""
    p = argparse.ArgumentParser(prog="python -m kernellab.bench merge",
                                description="Merge a sweep's runs (RUN/<gpu-type>/<op>/) per GPU type and across them.")
    p.add_argument("run", type=Path, metavar="RUN_FOLDER", help="the sweep's folder, or its name under results/")
    p.add_argument("--gpu-types", metavar="A,B",
                   help="the GPU types (subfolders) to merge; default: every subfolder with an <op>/results.json")
    args = p.parse_args(argv)
    from .. import ROOT

    run: Path = args.run
    if not run.is_dir() and (ROOT / "results" / run).is_dir():
        run = ROOT / "results" / run  # a bare run name, as --compare takes
    try:
        types = [t for t in args.gpu_types.split(",") if t] if args.gpu_types else gpu_types_in(run)
        summary = merge_run(run, types)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print(summary.read_text())
    print(f"merged into {run}")
    return 0
