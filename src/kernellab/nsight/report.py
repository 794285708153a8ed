"""The report `invoke profile` writes: `profile.json` (the run's record: op, shape, dtype, GPU, ncu's
settings, every implementation's kernels as kernellab.nsight.ncu.summarize gives them, or its trace file) and
`summary.md` (one table row per profiled kernel, candidates first, then baselines; for --trace, the list of
trace files). kernellab.nsight.profile builds the record and calls `write`; nothing here runs a tool.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .ncu import MIN_CLOCK_RATIO, count_cell
from .timeline import short

JSON = "profile.json"
SUMMARY = "summary.md"


def write(folder: Path, doc: dict[str, Any]) -> None:
    """profile.json and summary.md of `doc` into `folder`."""
    (folder / JSON).write_text(json.dumps(doc, indent=1) + "\n")
    (folder / SUMMARY).write_text(to_markdown(doc))


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _hazards(found: list[str] | None) -> str:
    return "n/a" if found is None else "; ".join(found) or "none"


def to_markdown(doc: dict[str, Any]) -> str:
    """The summary table: one row per profiled kernel, candidates first, then baselines."""
    dims = ", ".join(f"{k}={v}" for k, v in doc["shape"].items())
    lines = [f"# Profile: {doc['op']} ({dims}, {doc['dtype']}) on {doc['gpu']}", ""]
    if doc["mode"] == "trace":
        lines += ["torch.profiler traces (Chrome trace JSON; open in chrome://tracing or Perfetto):", ""]
        lines += [f"- {impl} ({info['role']}): `{info['trace']}`" for impl, info in doc["impls"].items()]
        return "\n".join(lines) + "\n"
    ncu = doc["ncu"]
    boost = bool(ncu.get("boost_run"))
    again = " Each call again at the GPU's own clocks (`--clocks`)." if boost else ""
    lines += [f"Nsight Compute {ncu['version'] or '?'}, `--set {doc['set']}`, {SETTINGS}; the call after "
              f"{doc['warmup_calls']} warm-up calls.{again}", ""]
    rows = [(f"{impl} ({info['role']})", k) for impl, info in doc["impls"].items() for k in info["kernels"]]
    lines += ncu_table(rows, lead="impl", clocks=boost, hazards=True)
    total, seconds = len(rows), doc["seconds"]
    lines += ["", f"{total} kernels profiled in {seconds:.1f} s ({seconds / max(total, 1):.1f} s per kernel, the op's "
              "load and warm-up included). Stalls: cycles per issued instruction a warp spent stalled for that "
              "reason. Hazards: register spills, shared-memory bank conflicts and shared atomics, from `--set full` "
              "(n/a in the basic set)."]
    if boost:
        lines += ["", CLOCKS_NOTE]
    return "\n".join(lines) + "\n"


#: How every Nsight Compute run here profiles (kernellab.nsight.ncu.ncu_argv; `--clocks` adds a second run).
SETTINGS = "clocks locked to base, caches flushed before each kernel"
#: Below a table with `--clocks`' columns: how to read them.
CLOCKS_NOTE = ("Follows SM clock: the share of the SM clock's change between the two runs (locked to base, then the "
               "GPU's own clocks, as the cell before it says) that the kernel's time followed. About 100%: the time is "
               "the SM's (instruction issue, latencies inside the SM), fewer instructions or shorter chains pay; about "
               "0%: it waits on what the SM clock does not drive (DRAM), fewer bytes pay. A dash: a figure is missing, "
               f"or the clocks differed by less than {MIN_CLOCK_RATIO:g}x.")
_COLUMNS = (("DRAM %", "---:"), ("L2 %", "---:"), ("SM %", "---:"), ("DRAM GB/s", "---:"),
            ("occupancy (achieved / theoretical)", "---:"), ("regs", "---:"), ("smem", "---:"),
            ("warp instructions", "---:"), ("limiter", "---"), ("top stalls", "---"))


def ncu_table(rows: Sequence[tuple[str, dict[str, Any]]], *, lead: str | None = None, clocks: bool = False,
              hazards: bool = False) -> list[str]:
    """Nsight Compute's table, a row per (first cell, kernel as kernellab.nsight.ncu.summarize gives it): `invoke
    profile`'s (lead "impl", its cell the implementation and role) and `invoke recipe profile`'s (no lead column).
    clocks: `--clocks`' two columns (ncu.with_boost's fields); hazards: the full set's hazards column."""
    columns = [*([(lead, "---")] if lead else []), ("kernel", "---"), ("time", "---:"),
               *((("time at own clocks", "---:"), ("follows SM clock", "---:")) if clocks else ()), *_COLUMNS,
               *([("hazards", "---")] if hazards else [])]
    lines = ["| " + " | ".join(name for name, _ in columns) + " |", "|" + "|".join(a for _, a in columns) + "|"]
    for first, k in rows:
        time_us = None if k["duration_ns"] is None else k["duration_ns"] / 1e3
        cells = ([first] if lead else []) + [f"`{short(k['kernel'], 48)}`", _fmt(time_us, ".1f", " µs")]
        cells += [_clocks(k)] if clocks else []
        cells += [_fmt(k["dram_pct"]), _fmt(k["l2_pct"]), _fmt(k["sm_pct"]), _fmt(k["dram_gbps"], ".0f"),
                  f"{_fmt(k['occupancy_achieved_pct'])} / {_fmt(k['occupancy_theoretical_pct'])} %",
                  _fmt(k["registers"], ".0f"), _fmt(k["shared_bytes"], ".0f", " B"), count_cell(k.get("instructions")),
                  k["limiter"], ", ".join(f"{s['reason']} {s['cycles_per_issue']:.1f}" for s in k["stalls"]) or "–"]
        cells += [_hazards(k.get("hazards"))] if hazards else []
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _clocks(k: dict[str, Any]) -> str:
    """The `--clocks` cells: the time at the GPU's own clocks (and the two SM clocks), and the share followed."""
    boost_ns, base_hz, boost_hz = k.get("boost_duration_ns"), k.get("sm_hz"), k.get("boost_sm_hz")
    time_cell = _fmt(None if boost_ns is None else boost_ns / 1e3, ".1f", " µs")
    if base_hz and boost_hz:
        time_cell += f" ({base_hz / 1e9:.2f} -> {boost_hz / 1e9:.2f} GHz)"
    share = k.get("clock_share")
    return f"{time_cell} | {_fmt(None if share is None else 100 * share, '.0f', '%')}"
