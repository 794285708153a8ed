"""Nsight Compute (`ncu`) for `invoke profile`: its command lines and what it gives back.

Owns the profiling run's ncu command line (`ncu_argv`: only the NVTX range RANGE, clocks locked to base, caches
flushed before each kernel, the basic set plus warp stalls and DRAM bytes, an optional kernel-name regex; or
`--clocks`' second run at the GPU's own clocks, and the share of the SM clock's change each kernel's time followed:
`clock_share`, `with_boost`), the export of a report (`import_argv`: `ncu --import REPORT --csv --page raw`, ncu's
own export, not its console text), reading that CSV back (`parse_raw_csv`), one kernel's summary from its row
(`summarize`: duration, DRAM/L2/SM throughput as % of peak, DRAM GB/s, occupancy, registers, shared memory, the
limiter, the top warp-stall reasons and, from the full set, `hazards`: register spills, shared bank conflicts,
shared atomics), ncu's version, and one sentence for a failed ncu run (`explain_failure`). Where ncu is installed is
kernellab.nsight.tools; the task that runs it is kernellab.nsight.profile.
"""
from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

from ..errors import ConfigError
from . import tools

#: The NVTX range the profiled call runs in (ncu --nvtx-include "kernellab/": a push/pop range of that name).
RANGE = "kernellab"
SETS = ("basic", "full")
#: The SM clock a kernel ran at (Hz), in every profile: `--clocks` compares two runs' clocks and times.
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
#: Beyond ncu's basic set: warp states (the stall reasons), DRAM bytes (GB/s to compare with the bench), the warp
#: instructions executed (the full set has them) and the SM clock.
BASIC_EXTRA = ("--section", "WarpStateStats", "--metrics",
               f"dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,{SM_CLOCK}")
#: `--clocks`' second run of each kernel, at the GPU's own clocks (not locked): only its time and SM clock.
CLOCK_METRICS = ("gpu__time_duration.sum", SM_CLOCK)
#: The two runs' SM clocks must differ by this ratio at least for a share of it to mean anything (a GPU whose
#: clocks are locked, or one that does not boost, gives none).
MIN_CLOCK_RATIO = 1.05
#: The one sentence for `--clocks` with `--trace` (the task refuses it before a container starts; the module too).
CLOCKS_NEED_COUNTERS = "--clocks compares Nsight Compute's runs at two clocks; --trace has no counters."
#: The summary's fields, from ncu's raw metric names.
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_achieved_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "occupancy_theoretical_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers": "launch__registers_per_thread",
    "shared_static_bytes": "launch__shared_mem_per_block_static",
    "shared_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    # Warp instructions executed, all the kernel's warps together: two kernels that stall alike per instruction can
    # differ in how many they issue (Liger-Kernel's float16 softmax backward at 4x8192 executes 8.8K to kernellab's
    # 16K: it computes in float16, kernellab in float32).
    "instructions": "smsp__inst_executed.sum",
    "sm_hz": SM_CLOCK,
}
#: What a kernel writer fixes first, from the full set's memory tables (the basic set lacks them): local-memory
#: accesses of register spills, shared-memory wavefronts and the bank conflicts among them, and shared-memory
#: atomics (a float atomicAdd on shared memory is a compare-and-swap loop: LDS + ATOMS.CAST.SPIN).
HAZARD_METRICS = {
    "spill_accesses": "sass__inst_executed_register_spilling",
    "shared_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "shared_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "shared_atomics": "smsp__inst_executed_op_shared_atom.sum",
}
#: Bank conflicts are named from this share of the shared-memory wavefronts up.
CONFLICTS_PCT = 10.0
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: Above this % of peak a unit is the limiter (Nsight Compute's own rule of thumb for "bound").
BOUND_PCT = 60.0


# --------------------------------------------------------------------------- ncu's command lines


def ncu_argv(ncu: str | Path, report: Path, program: Sequence[str], *, set_name: str = "basic",
             kernel: str | None = None, nvtx: bool = True, boost: bool = False) -> list[str]:
    """ncu on `program`, profiling only the kernels in the NVTX range RANGE, into `report` (.ncu-rep).
    nvtx=False: no range filter (a paper's program has no kernellab range; `kernel` picks the kernels).
    boost: `--clocks`' second run instead, at the GPU's own clocks, only the time and the SM clock (CLOCK_METRICS)."""
    if set_name not in SETS:
        raise ConfigError(f"unknown --set {set_name!r}; use one of {', '.join(SETS)}.")
    if boost:
        what: tuple[str, ...] = ("--metrics", ",".join(CLOCK_METRICS))
    else:
        what = ("--set", set_name, *(BASIC_EXTRA if set_name == "basic" else ("--metrics", SM_CLOCK)))
    argv = [str(ncu), *(("--nvtx", "--nvtx-include", f"{RANGE}/") if nvtx else ()),
            "--clock-control", "none" if boost else "base", "--cache-control", "all", *what,
            "--export", str(report), "--force-overwrite"]
    if kernel:
        check_regex(kernel)
        argv += ["--kernel-name-base", "function", "--kernel-name", f"regex:{kernel}"]
    return [*argv, *program]


def import_argv(ncu: str | Path, report: Path) -> list[str]:
    """ncu's own CSV export of a report: one row per profiled kernel, every metric, base units."""
    return [str(ncu), "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "function"]


def readiness(ncu: Path | None, has_gpu: bool) -> tools.Readiness:
    """What doctor says about Nsight Compute here: where ncu is, and whether this user may read the counters."""
    return tools.readiness(ncu, tools.read_params(), os.getuid(), has_gpu)


def check_regex(pattern: str) -> None:
    """--kernel must be a regular expression (ncu's `regex:` filter); ConfigError otherwise."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"--kernel {pattern!r} is not a regular expression: {e}.") from None


def ncu_version(ncu: Path) -> str | None:
    """`ncu --version`'s version number, or None when it cannot be read."""
    return tools.version(ncu, r"Version (\S+)")


# --------------------------------------------------------------------------- reading its output


def parse_raw_csv(text: str) -> list[dict[str, Any]]:
    """Rows of `ncu --import --csv --page raw`: {column: value}, numbers as floats, with a `units` map."""
    lines = [line for line in text.splitlines() if line.startswith('"')]  # ncu's own ==PROF== lines are not CSV
    rows = list(csv.reader(lines))
    if len(rows) < 2:
        return []
    header, units = rows[0], rows[1]
    unit_of = dict(zip(header, units))
    kernels = []
    for values in rows[2:]:
        row: dict[str, Any] = {"units": unit_of}
        for name, value in zip(header, values):
            row[name] = _number(value)
        kernels.append(row)
    return kernels


def _number(value: str) -> Any:
    text = value.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return value


def summarize(row: dict[str, Any]) -> dict[str, Any]:
    """One kernel's summary from its raw row (see METRICS); the limiter and the top three stalls."""
    out: dict[str, Any] = {"kernel": row.get("Kernel Name") or row.get("Function Name") or "?"}
    for key, metric in METRICS.items():
        value = row.get(metric)
        out[key] = _in_base_unit(value, row["units"].get(metric, "")) if isinstance(value, float) else None
    if out["duration_ns"] and out["dram_read_bytes"] is not None and out["dram_write_bytes"] is not None:
        out["dram_gbps"] = (out["dram_read_bytes"] + out["dram_write_bytes"]) / out["duration_ns"]
    else:
        out["dram_gbps"] = None
    shared = [v for v in (out["shared_static_bytes"], out["shared_dynamic_bytes"]) if v is not None]
    out["shared_bytes"] = sum(shared) if shared else None
    levels = {"DRAM": out["dram_pct"], "L2": out["l2_pct"], "L1/shared": out["l1_pct"]}
    out["limiter"] = limiter(out["sm_pct"], max(v for v in (out["memory_pct"], *levels.values(), 0.0) if v is not None))
    if out["limiter"] == "memory" and any(v is not None for v in levels.values()):
        busiest = max((v, name) for name, v in levels.items() if v is not None)[1]
        out["limiter"] = f"memory ({busiest})"
    stalls = sorted(((m.group(1), v) for name, v in row.items() if isinstance(v, float) and (m := _STALL.match(name))),
                    key=lambda kv: -kv[1])
    stalls = [(reason, v) for reason, v in stalls if reason != "selected" and v > 0]  # selected: issuing, no stall
    out["stalls"] = [{"reason": reason, "cycles_per_issue": round(v, 3)} for reason, v in stalls[:3]]
    out.update({key: row.get(metric) if isinstance(row.get(metric), float) else None
                for key, metric in HAZARD_METRICS.items()})
    out["hazards"] = hazards(out)
    return out


def clock_share(base_ns: float | None, base_hz: float | None, boost_ns: float | None,
                boost_hz: float | None) -> float | None:
    """How much of the SM clock's change a kernel's time followed, from its two runs (clocks locked to base, then the
    GPU's own): ln(time at base / time at boost) / ln(boost clock / base clock). About 1: the time is the SM's
    (instruction issue, latencies inside the SM); about 0: it is set by what the SM clock does not drive (DRAM).
    None where a figure is missing or the clocks differed by less than MIN_CLOCK_RATIO."""
    if not (base_ns and base_hz and boost_ns and boost_hz) or boost_hz / base_hz < MIN_CLOCK_RATIO:
        return None
    return math.log(base_ns / boost_ns) / math.log(boost_hz / base_hz)


def with_boost(kernels: list[dict[str, Any]], boost: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each kernel's summary with its `--clocks` run beside it (the same launches in the same order; one whose name
    differs, or that the second run lacks, gets None): boost_duration_ns, boost_sm_hz and clock_share."""
    for i, k in enumerate(kernels):
        b = boost[i] if i < len(boost) and boost[i]["kernel"] == k["kernel"] else {}
        k["boost_duration_ns"], k["boost_sm_hz"] = b.get("duration_ns"), b.get("sm_hz")
        k["clock_share"] = clock_share(k.get("duration_ns"), k.get("sm_hz"), k["boost_duration_ns"],
                                       k["boost_sm_hz"])
    return kernels


def hazards(k: dict[str, Any]) -> list[str] | None:
    """Register spills, shared-memory bank conflicts and shared atomics in a kernel's summary, in words: [] when it
    has none, None when the profile measured none of them (the basic set); one the profile lacks is said to be so."""
    if all(k.get(key) is None for key in HAZARD_METRICS):
        return None
    found = []
    spills, atomics = k.get("spill_accesses"), k.get("shared_atomics")
    wavefronts, conflicts = k.get("shared_wavefronts"), k.get("shared_bank_conflicts")
    if spills is None:
        found.append("register spills: not measured")
    elif spills:
        found.append(f"register spills: {short_count(spills)} local loads and stores")
    if wavefronts is None or conflicts is None:
        found.append("shared bank conflicts: not measured")
    elif wavefronts and 100 * conflicts / wavefronts >= CONFLICTS_PCT:
        found.append(f"shared bank conflicts: {100 * conflicts / wavefronts:.0f}% of {short_count(wavefronts)} shared "
                     "wavefronts")
    if atomics is None:
        found.append("shared atomics: not measured")
    elif atomics:
        found.append(f"shared atomics: {short_count(atomics)} (a float one is a compare-and-swap loop)")
    return found


def short_count(n: float) -> str:
    """1234 -> 1.2K, 888960 -> 889K, 8300780 -> 8.3M; named after rounding (999600 -> 1.0M, not 1000K)."""
    value = float(n)
    for unit in ("", "K", "M"):
        text = f"{value:.1f}" if unit and value < 9.95 else f"{value:.0f}"
        if float(text) < 1000:
            return text + unit
        value /= 1000
    return (f"{value:.1f}" if value < 9.95 else f"{value:.0f}") + "G"


def count_cell(n: float | None) -> str:
    """A count in a summary table's cell (short_count), or a dash where the profile lacks it."""
    return "–" if n is None else short_count(n)


def _in_base_unit(value: float, unit: str) -> float:
    scale = {"usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9,
             "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    return value * scale.get(unit, 1.0)


def limiter(sm_pct: float | None, memory_pct: float | None) -> str:
    """memory, compute or latency: which unit runs above BOUND_PCT of its peak (the higher one), else
    latency (neither is busy: too little parallelism, or waiting). summarize() names the memory level."""
    sm, mem = sm_pct or 0.0, memory_pct or 0.0
    if max(sm, mem) < BOUND_PCT:
        return "latency"
    return "memory" if mem >= sm else "compute"


def explain_failure(output: str, code: int, ncu: str | Path) -> str:
    """One sentence for a failed ncu run, from what it printed."""
    if "ERR_NVGPUCTRPERM" in output:
        return tools.COUNTERS_REMEDY
    if re.search(r"[Dd]evice .*(is not supported|not supported)|Unsupported GPU|cannot profile .*architecture", output):
        return (f"this Nsight Compute ({ncu}) does not support this GPU; install a newer Nsight Compute "
                "(each release lists the GPUs it supports) or use `invoke profile --trace`.")
    errors = [line.split("==ERROR==", 1)[1].strip() for line in output.splitlines() if "==ERROR==" in line]
    if errors:
        return f"ncu failed: {errors[0]}"
    tail = [line for line in output.splitlines() if line.strip()][-1:]
    return f"ncu exited with code {code}{': ' + tail[0] if tail else ''}."
