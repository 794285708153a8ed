"""A run's folder: results.json (everything), results.csv and summary.md.

results.json is the source of truth; the CSV and the Markdown table are views of it, so an old
run can be re-rendered or compared without the GPU that made it. A run's raw samples (every timed
sample of every row, the clock monitor's readings) are most of its size: past RAW_INLINE_BYTES they
go to samples.json.gz beside it (results.json's "raw" names it), and load() puts them back, so a full
run stays small enough to commit.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

from ..errors import BenchError
from . import sources

SCHEMA = 1
#: merged.json's "kind": a run merged over GPU types (kernellab.bench.merge).
MERGED = "merged"
MERGED_FILE = "merged.json"


#: Raw samples up to this size (as JSON) stay inside results.json; more go to RAW_FILE.
RAW_INLINE_BYTES = 1_000_000
RAW_FILE = "samples.json.gz"


def write(folder: Path, doc: dict[str, Any]) -> list[Path]:
    """Write results.json, results.csv and summary.md into folder (and samples.json.gz when the raw
    samples are large: see RAW_INLINE_BYTES); return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    main, raw_json = split_raw(doc)
    files = {
        "results.json": json.dumps(main, indent=1, default=str) + "\n",
        "results.csv": to_csv(doc),
        "summary.md": to_markdown(doc),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    written = [folder / name for name in files]
    raw_file = folder / RAW_FILE
    if raw_json is not None:
        # mtime=0: the same samples give the same bytes, so a rewritten run is no change to git.
        raw_file.write_bytes(gzip.compress(raw_json.encode(), mtime=0))
        written.append(raw_file)
    elif raw_file.exists():
        raw_file.unlink()  # an earlier write's samples, which results.json no longer names
    return written


def split_raw(doc: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(results.json's document, the raw samples as RAW_FILE's JSON, or None when they stay inline)."""
    rows = doc.get("rows") or []
    raw: dict[str, Any] = {"schema": SCHEMA, "samples_ms": [row.get("samples_ms") for row in rows]}
    if "clock_samples" in doc:
        raw["clock_samples"] = doc["clock_samples"]
    raw_json = json.dumps(raw, separators=(",", ":"), default=str)
    if len(raw_json) <= RAW_INLINE_BYTES:
        return doc, None
    main = {k: v for k, v in doc.items() if k != "clock_samples"}
    main["raw"] = RAW_FILE
    main["rows"] = [{k: v for k, v in row.items() if k != "samples_ms"} for row in rows]
    return main, raw_json


def _join_raw(file: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """doc with the raw samples its "raw" names put back (a no-op for a run that kept them inline)."""
    name = doc.pop("raw", None)
    if name is None:
        return doc
    where = file.parent / str(name)
    try:
        raw = json.loads(gzip.decompress(where.read_bytes()))
    except FileNotFoundError:
        raise BenchError(f"{file} keeps its raw samples in {name}, which is not beside it; copy the run's "
                         "whole folder.") from None
    except (OSError, ValueError, EOFError) as e:
        raise BenchError(f"{where} is damaged ({e}); the run's samples cannot be read.") from None
    samples = raw.get("samples_ms") if isinstance(raw, dict) else None
    if not isinstance(samples, list) or len(samples) != len(doc["rows"]):
        raise BenchError(f"{where} does not match {file.name}: it holds samples for "
                         f"{len(samples) if isinstance(samples, list) else 'no'} rows, not {len(doc['rows'])}.")
    for row, row_samples in zip(doc["rows"], samples):
        if row_samples is not None:  # None: a row that was never timed (failed, skipped) had none
            row["samples_ms"] = row_samples
    if "clock_samples" in raw:
        doc["clock_samples"] = raw["clock_samples"]
    return doc


def load(path: Path, *, samples: bool = True) -> dict[str, Any]:
    """A run's results.json, given the file, its folder, or a run name under results/; or a merged run.

    A merged run (a folder with merged.json, written by kernellab.bench.merge) comes back as
    {"schema": 1, "kind": "merged", "run", "gpu_types": {type: that type's results doc}, "missing", "path"}.
    samples=False: the rows' statistics only, the raw samples not put back (a run kept without its samples.json.gz
    still reads; what compares runs needs them).
    """
    from .. import ROOT

    candidates = [path, path / "results.json", path / MERGED_FILE,
                  ROOT / "results" / path / "results.json", ROOT / "results" / path / MERGED_FILE]
    for candidate in candidates:
        if candidate.is_file():
            try:
                doc = json.loads(candidate.read_text())
            except ValueError as e:
                raise BenchError(f"{candidate} is not valid JSON ({e}); give a run's folder.") from None
            if is_merged(doc) and isinstance(doc.get("gpu_types"), dict):
                return _load_merged(candidate, doc, samples)
            if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "rows" not in doc:
                raise BenchError(f"{candidate} is not a kernellab bench result (schema {SCHEMA}).")
            return _join_raw(candidate, doc) if samples else doc
    raise BenchError(f"no results.json at {path}; give a folder under results/ or its results.json "
                     f"(a merged run: its folder or {MERGED_FILE}).")


def is_merged(doc: Any) -> bool:
    """Whether doc is a merged run (several GPU types) rather than one run's results."""
    return isinstance(doc, dict) and doc.get("schema") == SCHEMA and doc.get("kind") == MERGED


def _load_merged(file: Path, doc: dict[str, Any], samples: bool = True) -> dict[str, Any]:
    # merged.json names each type's results.json relative to itself, so a moved run still loads.
    types = {gpu_type: load(file.parent / rel, samples=samples) for gpu_type, rel in doc["gpu_types"].items()}
    return {"schema": SCHEMA, "kind": MERGED, "run": doc.get("run", file.parent.name), "gpu_types": types,
            "missing": doc.get("missing") or {}, "path": str(file.parent)}


# --- views ----------------------------------------------------------------------------------

def shape_label(shape: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def pass_of(row: dict[str, Any]) -> str:
    """The pass a row timed: forward (every row of a run made before backward passes existed), backward or full."""
    return str(row.get("pass") or "forward")


def impl_label(row: dict[str, Any]) -> str:
    """The implementation and, past the forward, its pass: `kernellab`, `kernellab backward`, `eager full`."""
    which = pass_of(row)
    return row["impl"] if which == "forward" else f"{row['impl']} {which}"


def row_key(row: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(op, shape, dtype, pass, impl): what matches a row across runs (compare, merge, plots); key[:4] is its case."""
    return row["op"], shape_label(row["shape"]), row["dtype"], pass_of(row), row["impl"]


def has_passes(doc: dict[str, Any]) -> bool:
    """Whether some row of the run timed a backward or full pass (its tables then get a `pass` column)."""
    return any(pass_of(r) != "forward" for r in doc["rows"])


def fmt_time(ms: float | None) -> str:
    if ms is None:
        return ""
    if ms < 1.0:
        return f"{ms * 1e3:.2f} us"
    if ms < 1000.0:
        return f"{ms:.3f} ms"
    return f"{ms / 1e3:.3f} s"


def _num(x: float | None) -> str:
    """Three significant digits, no exponent above 100: 3010, 95.3, 0.0123."""
    if x is None:
        return ""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def baseline_names(doc: dict[str, Any]) -> list[str]:
    """Every baseline that some candidate row was compared with, in order of first appearance."""
    names: list[str] = []
    for row in doc["rows"]:
        for name in row.get("speedups") or {}:
            if name not in names:
                names.append(name)
    return names


def _speedup_cell(ratio: dict[str, float] | None) -> str:
    if not ratio:
        return ""
    return f"{ratio['value']:.2f}x [{ratio['lo']:.2f}, {ratio['hi']:.2f}]"


def notes(row: dict[str, Any]) -> str:
    """Why a row has no figure, what is suspect about it, and its CUDA-graph figure if any."""
    out = []
    if row["status"] != "ok":
        out.append(f"{row['status']}: {row.get('reason', '')}".rstrip(": "))
    if row.get("suspect"):
        out.append("SUSPECT: " + "; ".join(row["suspect"]))
    if row.get("host_ms") and row.get("stats") and row["host_ms"] > row["stats"]["median"]:
        out.append(f"CPU-bound: {fmt_time(row['host_ms'])} host time per call")
    if row.get("graph_ms") is not None:
        out.append(f"CUDA graph {fmt_time(row['graph_ms'])}")
    if row.get("repeat_medians_ms"):
        medians = row["repeat_medians_ms"]
        out.append(f"{len(medians)} measurements: medians {fmt_time(min(medians))}-{fmt_time(max(medians))}")
    if row.get("stop_reason") == "timeout":
        out.append("stopped at timeout")
    clocks = row.get("clocks") or {}
    if clocks.get("sagged"):
        out.append(f"SM clock {clocks['sm_mhz_median']:.0f} MHz")
    return "; ".join(out)


CSV_FIELDS = ["op", "shape", "dtype", "impl", "pass", "role", "status", "timer", "median_ms", "q1_ms", "q3_ms",
              "iqr_ms", "mean_ms", "stdev_ms", "min_ms", "n", "stop_reason", "graph_ms", "gbps", "tflops",
              "pct_peak", "bound", "first_call_ms", "host_ms", "suspect", "reason"]


def to_csv(doc: dict[str, Any]) -> str:
    """One line per (op, shape, dtype, impl); a speedup, low and high column per baseline."""
    extra = [f"speedup_vs_{b}{s}" for b in baseline_names(doc) for s in ("", "_lo", "_hi")]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS + extra, lineterminator="\n")
    w.writeheader()
    for row in doc["rows"]:
        s = row.get("stats") or {}
        line: dict[str, Any] = {
            "op": row["op"], "shape": shape_label(row["shape"]), "dtype": row["dtype"], "impl": row["impl"],
            "pass": pass_of(row), "role": row["role"], "status": row["status"], "timer": row.get("timer"),
            "median_ms": s.get("median"), "q1_ms": s.get("q1"), "q3_ms": s.get("q3"), "iqr_ms": s.get("iqr"),
            "mean_ms": s.get("mean"), "stdev_ms": s.get("stdev"), "min_ms": s.get("min"), "n": s.get("n"),
            "stop_reason": row.get("stop_reason"), "graph_ms": row.get("graph_ms"), "gbps": row.get("gbps"),
            "tflops": row.get("tflops"), "pct_peak": row.get("pct_peak"), "bound": row.get("bound"),
            "first_call_ms": row.get("first_call_ms"), "host_ms": row.get("host_ms"), "suspect": "; ".join(row.get("suspect") or []),
            "reason": row.get("reason", ""),
        }
        for name, ratio in (row.get("speedups") or {}).items():
            line[f"speedup_vs_{name}"] = ratio["value"]
            line[f"speedup_vs_{name}_lo"] = ratio["lo"]
            line[f"speedup_vs_{name}_hi"] = ratio["hi"]
        w.writerow(line)
    return buf.getvalue()


def header(doc: dict[str, Any]) -> list[str]:
    """Lines that say where and how the figures were measured."""
    env = doc["environment"]
    gpu = env.get("gpu")
    lines = []
    if gpu:
        l2 = f", {gpu['l2_bytes'] / 2**20:.0f} MiB L2" if gpu.get("l2_bytes") else ""
        lines.append(f"- GPU: {gpu['name']} (sm_{gpu['compute_capability'].replace('.', '')}, "
                     f"{gpu['sm_count']} SMs{l2}), driver {gpu.get('driver') or 'unknown'}")
    else:
        lines.append("- No GPU: CPU timing (time.perf_counter, no cache flush); not comparable with GPU figures")
    lines.append(f"- Software: torch {env.get('torch')}, CUDA runtime {env.get('cuda_runtime')}, "
                 f"nvcc {env.get('nvcc')}, triton {env.get('triton')}, Python {env.get('python')}")
    image = env.get("image")
    if isinstance(image, dict):
        lock = (image.get("lock_sha256") or "")[:12]
        image = f"{image.get('id') or 'unknown id'} (lock {lock or 'none'})"
    git = env.get("git") or {}
    commit = (git.get("commit") or "no commit")[:12]
    dirty = {True: ", dirty", False: "", None: ", dirty: unknown"}[git.get("dirty")]
    lines.append(f"- Image: {image}; commit {commit}{dirty}")
    kernels = sources.header_line(doc)
    if kernels:
        lines.append(kernels)
    lock = env.get("clock_lock")
    if lock:
        lines.append(f"- Clocks {'locked' if lock['locked'] else 'not locked'} ({lock['evidence']}); "
                     f"sampled through {env.get('clock_source')}")
    peaks = doc.get("peaks")
    if peaks:
        gemm = ", ".join(f"{k} {v:.0f}" for k, v in peaks["gemm_tflops"].items())
        sizes = "/".join(f"{n}^3" for n in peaks.get("gemm_sizes", []))
        lines.append(f"- Measured peaks: copy {peaks['copy_gbps']:.0f} GB/s (read+write); cuBLAS GEMM "
                     f"(best of {sizes}) TFLOP/s: {gemm}")
        sheet = doc.get("datasheet")
        if sheet:
            lines.append(f"- Datasheet: {sheet['memory_gbps']} GB/s, fp16 {sheet['fp16_tflops']}, "
                         f"fp32 {sheet['fp32_tflops']} TFLOP/s ({sheet['source']})")
    s = doc["settings"]
    lines.append(f"- Timing: {doc['timer']}; one untimed call first; "
                 + ("L2 flushed (2x its size) before every sample, then the stream held until the call is "
                    "queued (host launch overhead excluded); " if doc["timer"] == "cuda-events" else "")
                 + f"candidates and baselines interleaved; stop at >= {s['min_samples']} samples and "
                   f">= {s['min_time_s']} s with stdev < {s['max_rel_stdev']:.0%} of mean or a noise plateau, "
                   f"or {s['timeout_s']} s per function{' (quick run)' if doc.get('quick') else ''}")
    parts = doc.get("parts")
    if parts:  # a run merged from one bench run per op (kernellab.bench.merge)
        lines.append(f"- Merged from {len(parts)} runs, one per op: "
                     + ", ".join(f"{p['op']} ({p.get('host') or 'unknown host'})" for p in parts))
    for name, system in (doc.get("systems") or {}).items():  # a recipe's published system, a baseline (--against)
        wheels = "; ".join(f"{n} {w['version']}" + (f", wheel sha256 {w['sha256'][:12]}" if w.get("sha256") else "")
                           for n, w in system.get("packages", {}).items())
        lines.append(f"- Baseline `{name}`: {system.get('title') or 'a published system'} ({wheels or 'its sources'}), "
                     f"from recipe {system['recipe']}; checked against the op's reference before it is timed, as "
                     f"every candidate and baseline is")
    lines.append("- Speedup = baseline median / candidate median, 95% bootstrap interval in brackets; "
                 "% peak = share of the measured copy bandwidth or GEMM rate, whichever binds")
    repeated = [len(r["repeat_medians_ms"]) for r in doc["rows"] if r.get("repeat_medians_ms")]
    if repeated:
        lines.append(f"- Cases with a median under {fmt_time(doc.get('settings', {}).get('graph_below_ms', 0.010))} were measured "
                     f"{max(repeated)} times, each its own interleaved measurement: their speedup is the median of "
                     "the measurements' ratios, its interval from the lowest end of theirs to the highest")
    return lines


def to_markdown(doc: dict[str, Any]) -> str:
    """summary.md: the environment in a few lines, then one table ready to paste into a paper."""
    bases = baseline_names(doc)
    passes = has_passes(doc)  # an op with a backward: its forward, backward and full rows side by side
    cols = ["op", "shape", "dtype", "impl", *(["pass"] if passes else []), "median", "IQR", "GB/s", "TFLOP/s", "% peak",
            *[f"vs {b}" for b in bases], "notes"]
    out = [f"# kernellab bench: {doc['run']}", "", *header(doc), "",
           "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in doc["rows"]:
        s = row.get("stats") or {}
        speedups = row.get("speedups") or {}
        cells = [row["op"], shape_label(row["shape"]), row["dtype"],
                 row["impl"] + (" (baseline)" if row["role"] == "baseline" else ""),
                 *([pass_of(row)] if passes else []), fmt_time(s.get("median")), fmt_time(s.get("iqr")), _num(row.get("gbps")),
                 _num(row.get("tflops")), _num(row.get("pct_peak")),
                 *[_speedup_cell(speedups.get(b)) for b in bases], notes(row)]
        out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if doc.get("warnings"):
        out += ["", "Warnings:", *[f"- {w}" for w in doc["warnings"]]]
    return "\n".join(out) + "\n"
