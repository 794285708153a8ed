"""`invoke profile`: Nsight Compute on exactly the launches the benchmark times, candidates and baselines
side by side; with `--trace`, a torch.profiler trace instead (no counters needed).

    python -m kernellab.profile -k OP [--shape N|k=v,...] [--dtype D] [--impl NAME ...] [--set basic|full]
                                [--kernel REGEX] [--trace] [--out DIR] [--kernels DIR]

What the task runs, in the target's container or natively. For each implementation (a candidate or a
baseline) it starts `ncu` on a child of itself (`--launch`), which loads the op, makes the bench inputs,
calls the implementation WARMUP times (JIT, torch.compile, caches: not profiled) and then once inside the
NVTX range `kernellab`; ncu profiles only the kernels launched in that range (`--nvtx-include`), with its
clocks locked to base (`--clock-control base`) and caches flushed before each kernel (`--cache-control
all`), both recorded. `--kernel` narrows it to kernels whose function name (demangled, no parameters:
works for C++ templates and Triton kernels alike) matches a regular expression.

The reports are read back with `ncu --import REPORT --csv --page raw` (ncu's own export, not its
console text) and summarized per kernel: duration, DRAM/L2/SM throughput as % of peak, DRAM GB/s,
achieved vs theoretical occupancy, registers per thread, shared memory per block, the limiter and the
top warp-stall reasons. Output: `<out>/profile/<op>-<shape>-<dtype>-<impl>.ncu-rep` (and `.csv`, every metric),
`profile.json` and `summary.md`; written to `<out>/profile.partial/` and renamed at the end, so a failed run leaves no
report that looks complete.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from . import ROOT, nvtools, proc, pythonpath
from .errors import ConfigError, KernellabError, ProfileError
from .opspec import KERNELS, OpSpec, parse_spec

#: The NVTX range the profiled call runs in (ncu --nvtx-include "kernellab/": a push/pop range of that name).
RANGE = "kernellab"
#: Calls before the profiled one: JIT compiles, torch.compile, first-launch module loads, warm caches.
WARMUP = 3
SETS = ("basic", "full")
#: Beyond ncu's basic set: warp states (the stall reasons) and DRAM bytes (GB/s to compare with the bench).
BASIC_EXTRA = ("--section", "WarpStateStats", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum")
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
}
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: Above this % of peak a unit is the limiter (Nsight Compute's own rule of thumb for "bound").
BOUND_PCT = 60.0


# --------------------------------------------------------------------------- ncu's command line and its output


def ncu_argv(ncu: str | Path, report: Path, program: Sequence[str], *, set_name: str = "basic",
             kernel: str | None = None) -> list[str]:
    """ncu on `program`, profiling only the kernels in the NVTX range RANGE, into `report` (.ncu-rep)."""
    if set_name not in SETS:
        raise ConfigError(f"unknown --set {set_name!r}; use one of {', '.join(SETS)}.")
    argv = [str(ncu), "--nvtx", "--nvtx-include", f"{RANGE}/", "--clock-control", "base", "--cache-control", "all",
            "--set", set_name, *(BASIC_EXTRA if set_name == "basic" else ()),
            "--export", str(report), "--force-overwrite"]
    if kernel:
        _check_regex(kernel)
        argv += ["--kernel-name-base", "function", "--kernel-name", f"regex:{kernel}"]
    return [*argv, *program]


def import_argv(ncu: str | Path, report: Path) -> list[str]:
    """ncu's own CSV export of a report: one row per profiled kernel, every metric, base units."""
    return [str(ncu), "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "function"]


def _check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"--kernel {pattern!r} is not a regular expression: {e}.") from None


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
    return out


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
        return nvtools.COUNTERS_REMEDY
    if re.search(r"[Dd]evice .*(is not supported|not supported)|Unsupported GPU|cannot profile .*architecture", output):
        return (f"this Nsight Compute ({ncu}) does not support this GPU; install a newer Nsight Compute "
                "(each release lists the GPUs it supports) or use `invoke profile --trace`.")
    errors = [line.split("==ERROR==", 1)[1].strip() for line in output.splitlines() if "==ERROR==" in line]
    if errors:
        return f"ncu failed: {errors[0]}"
    tail = [line for line in output.splitlines() if line.strip()][-1:]
    return f"ncu exited with code {code}{': ' + tail[0] if tail else ''}."


# --------------------------------------------------------------------------- the profiled child (--launch)


def launch(root: Path, name: str, impl: str, shape: dict[str, int], dtype: str, trace: Path | None = None) -> int:
    """Load the op, warm the implementation up, call it once inside the NVTX range (or a torch.profiler
    trace written to `trace`)."""
    import torch

    from . import ops

    spec = _find(root, name)
    module = ops.load(spec)
    fn = {**module.candidates, **module.baselines}[impl]
    inputs = module.make_inputs(shape, dtype, "cuda", spec.seeds[0] if spec.seeds else 0)
    for _ in range(WARMUP):
        fn(*inputs)
    torch.cuda.synchronize()
    if trace is not None:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn(*inputs)
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(trace))
        return 0
    torch.cuda.nvtx.range_push(RANGE)
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


# --------------------------------------------------------------------------- the driver


def _find(root: Path, name: str) -> OpSpec:
    from .watch import find_op

    return parse_spec(find_op(root, name) / "op.toml")


def choose_shape(spec: OpSpec, shape: str | None) -> dict[str, int]:
    """--shape: an index into the op's bench shapes, or `k=v,k=v`; default the first bench shape."""
    if shape is None:
        return dict(spec.bench_shapes[0])
    if shape.isdigit():
        index = int(shape)
        if index >= len(spec.bench_shapes):
            raise ConfigError(f"--shape {shape}: {spec.name} has {len(spec.bench_shapes)} bench shapes "
                              f"(0 to {len(spec.bench_shapes) - 1}): {spec.bench_shapes}.")
        return dict(spec.bench_shapes[index])
    try:
        pairs = dict(part.split("=", 1) for part in shape.split(","))
        chosen = {k.strip(): int(v) for k, v in pairs.items()}
    except ValueError:
        raise ConfigError(f"--shape {shape!r}: give an index into the bench shapes or k=v,k=v with integers.") from None
    want = set(spec.bench_shapes[0])
    if set(chosen) != want:
        raise ConfigError(f"--shape {shape!r}: {spec.name}'s shapes have the keys {', '.join(sorted(want))}.")
    return chosen


def choose_impls(spec: OpSpec, wanted: Sequence[str] | None) -> list[tuple[str, str]]:
    """(name, role) for every candidate and baseline, or the ones named with --impl."""
    impls = [(n, "candidate") for n in spec.candidates] + [(n, "baseline") for n in spec.baselines]
    if not wanted:
        return impls
    names = [n for n, _ in impls]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise ConfigError(f"--impl {unknown[0]}: {spec.name} has {', '.join(names)}.")
    return [(n, r) for n, r in impls if n in wanted]


def file_stem(spec: OpSpec, shape: dict[str, int], dtype: str, impl: str) -> str:
    dims = "x".join(str(v) for v in shape.values())
    return f"{spec.name}-{dims}-{dtype}-{impl}"


def run(root: Path, name: str, *, shape: str | None = None, dtype: str | None = None,
        impls: Sequence[str] | None = None, set_name: str = "basic", kernel: str | None = None,
        trace: bool = False, out: Path | None = None) -> Path:
    """Profile (or trace) every chosen implementation; returns the finished `<out>/profile` folder."""
    import torch

    spec = _find(root, name)
    if spec.kind == "cpu":
        raise ProfileError(f"{spec.name} is a CPU op: Nsight Compute profiles GPU kernels only.")
    if not torch.cuda.is_available():
        raise ProfileError("no GPU is visible here: profile on the GPU machine, natively or in a target whose "
                           "container gets the GPU (`invoke doctor` shows how it is passed).")
    chosen_shape = choose_shape(spec, shape)
    chosen_dtype = dtype or spec.bench_dtypes[0]
    if chosen_dtype not in spec.dtypes:
        raise ConfigError(f"--dtype {chosen_dtype}: {spec.name} supports {', '.join(spec.dtypes)}.")
    chosen = choose_impls(spec, impls)
    from .ops import arch_requirements

    _, unavailable = arch_requirements(spec) if spec.kind == "cuda" else ([], {})
    for impl, _role in chosen:
        if impl in unavailable:
            raise ProfileError(f"cannot profile {unavailable[impl]}.")
    if set_name not in SETS:
        raise ConfigError(f"unknown --set {set_name!r}; use one of {', '.join(SETS)}.")
    if kernel:
        _check_regex(kernel)
    ncu = None
    if not trace:
        ncu = nvtools.find("ncu")
        if ncu is None:
            raise ProfileError("Nsight Compute (ncu) is not installed here: install it (or a CUDA toolkit that "
                               "ships it), set KERNELLAB_NCU to its path, or use --trace.")
    from .bench.runner import run_name

    gpu = torch.cuda.get_device_name(0)
    folder = out or ROOT / "results" / run_name(dt.datetime.now(dt.timezone.utc), gpu)
    partial, final = folder / "profile.partial", folder / "profile"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    doc: dict[str, Any] = {
        "op": spec.name, "shape": chosen_shape, "dtype": chosen_dtype, "gpu": gpu, "torch": torch.__version__,
        "mode": "trace" if trace else "ncu", "set": None if trace else set_name, "kernel_filter": kernel,
        "warmup_calls": WARMUP, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "ncu": None if ncu is None else {"path": str(ncu), "version": _ncu_version(ncu),
                                         "clock_control": "base", "cache_control": "all",
                                         "nvtx_range": RANGE},
        "impls": {},
    }
    try:
        with gpu_lock(torch):  # a benchmark or sanitizer beside ncu would change what it measures
            _profile_each(spec, root, chosen, chosen_shape, chosen_dtype, doc, partial, ncu, set_name, kernel, trace)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # nothing half-done left beside finished runs
        raise
    (partial / "profile.json").write_text(json.dumps(doc, indent=1) + "\n")
    (partial / "summary.md").write_text(to_markdown(doc))
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return final


def _profile_each(spec: OpSpec, root: Path, chosen: list[tuple[str, str]], chosen_shape: dict[str, int],
                  chosen_dtype: str, doc: dict[str, Any], partial: Path, ncu: Path | None, set_name: str,
                  kernel: str | None, trace: bool) -> None:
    t_all = time.perf_counter()
    for impl, role in chosen:
        stem = file_stem(spec, chosen_shape, chosen_dtype, impl)
        program = [sys.executable, "-m", "kernellab.profile", "--launch", "-k", spec.name, "--impl", impl,
                   "--shape", json.dumps(chosen_shape), "--dtype", chosen_dtype, "--kernels", str(root)]
        print(f"profile: {spec.name} {impl} ({role}) ...", flush=True)
        t0 = time.perf_counter()
        if trace:
            path = partial / f"{stem}.trace.json"
            _run_child([*program, "--trace-to", str(path)], what=f"tracing {impl}")
            doc["impls"][impl] = {"role": role, "trace": path.name, "seconds": round(time.perf_counter() - t0, 2)}
            continue
        assert ncu is not None
        report = partial / f"{stem}.ncu-rep"
        result = proc.run(ncu_argv(ncu, report, program, set_name=set_name, kernel=kernel), check=False,
                          env=child_env())
        if result.returncode != 0 or not report.exists():
            output = result.stdout + result.stderr
            if result.returncode == 0 and "No kernels were profiled" in output:
                raise ProfileError(_no_kernel(impl, kernel))
            raise ProfileError(f"profiling {impl}: {explain_failure(output, result.returncode, ncu)}")
        csv_text = proc.run(import_argv(ncu, report), check=False).stdout
        (partial / f"{stem}.csv").write_text(csv_text)  # every metric, for a spreadsheet or a later comparison
        kernels = [summarize(row) for row in parse_raw_csv(csv_text)]
        if not kernels:
            raise ProfileError(_no_kernel(impl, kernel))
        seconds = time.perf_counter() - t0
        doc["impls"][impl] = {"role": role, "report": report.name, "seconds": round(seconds, 2),
                              "seconds_per_kernel": round(seconds / len(kernels), 2), "kernels": kernels}
    doc["seconds"] = round(time.perf_counter() - t_all, 2)


def gpu_lock(torch: Any) -> Any:
    """The GPU's mutex (kernellab.bench.gpu_mutex, shared with `invoke bench`), by its UUID."""
    from . import cache_root
    from .bench import gpu_mutex

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    key = str(getattr(props, "uuid", "") or props.name)
    return gpu_mutex.exclusive_gpu(cache_root(), key, label=f"{props.name} {key}")


def _no_kernel(impl: str, kernel: str | None) -> str:
    if kernel:
        return (f"--kernel {kernel!r} matches no kernel that {impl} launches; the filter is a regular expression "
                "on the function name (no namespace or parameters); run without --kernel to see the names.")
    return f"{impl} launched no GPU kernel inside the profiled call (is it a CPU implementation?)."


def child_env() -> dict[str, str]:
    """What a profiled (or sanitized) child of this process gets beside its environment: this kernellab on
    PYTHONPATH, and a TMPDIR (ncu needs one that exists)."""
    return {"PYTHONPATH": pythonpath(), "TMPDIR": os.environ.get("TMPDIR", "/tmp")}


def _run_child(argv: list[str], what: str) -> None:
    result = proc.run(argv, check=False, env=child_env())
    if result.returncode != 0:
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        raise ProfileError(f"{what} failed: {lines[-1] if lines else f'exit code {result.returncode}'}")


def _ncu_version(ncu: Path) -> str | None:
    try:
        text = proc.run([str(ncu), "--version"], check=False, timeout=60).stdout
    except KernellabError:
        return None
    m = re.search(r"Version (\S+)", text)
    return m.group(1) if m else None


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def to_markdown(doc: dict[str, Any]) -> str:
    """The summary table: one row per profiled kernel, candidates first, then baselines."""
    dims = ", ".join(f"{k}={v}" for k, v in doc["shape"].items())
    lines = [f"# Profile: {doc['op']} ({dims}, {doc['dtype']}) on {doc['gpu']}", ""]
    if doc["mode"] == "trace":
        lines += ["torch.profiler traces (Chrome trace JSON; open in chrome://tracing or Perfetto):", ""]
        lines += [f"- {impl} ({info['role']}): `{info['trace']}`" for impl, info in doc["impls"].items()]
        return "\n".join(lines) + "\n"
    ncu = doc["ncu"]
    lines += [f"Nsight Compute {ncu['version'] or '?'}, `--set {doc['set']}`, clocks locked to base, caches flushed "
              f"before each kernel; the call after {doc['warmup_calls']} warm-up calls.", "",
              "| impl | kernel | time | DRAM % | L2 % | SM % | DRAM GB/s | occupancy (achieved / theoretical) "
              "| regs | smem | limiter | top stalls |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for impl, info in doc["impls"].items():
        for k in info["kernels"]:
            stalls = ", ".join(f"{s['reason']} {s['cycles_per_issue']:.1f}" for s in k["stalls"]) or "–"
            time_us = None if k["duration_ns"] is None else k["duration_ns"] / 1e3
            occupancy = f"{_fmt(k['occupancy_achieved_pct'])} / {_fmt(k['occupancy_theoretical_pct'])} %"
            name = k["kernel"] if len(k["kernel"]) <= 48 else k["kernel"][:45] + "..."
            lines.append(f"| {impl} ({info['role']}) | `{name}` | {_fmt(time_us, '.1f', ' µs')} | {_fmt(k['dram_pct'])} "
                         f"| {_fmt(k['l2_pct'])} | {_fmt(k['sm_pct'])} | {_fmt(k['dram_gbps'], '.0f')} | {occupancy} "
                         f"| {_fmt(k['registers'], '.0f')} | {_fmt(k['shared_bytes'], '.0f', ' B')} | {k['limiter']} "
                         f"| {stalls} |")
    total = sum(len(i["kernels"]) for i in doc["impls"].values())
    lines += ["", f"{total} kernels profiled in {doc['seconds']:.1f} s ({doc['seconds'] / max(total, 1):.1f} s per kernel, "
              "the op's load and warm-up included). Stalls: cycles per issued instruction a warp spent stalled "
              "for that reason."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernellab.profile", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="op", required=True, metavar="OP")
    parser.add_argument("--shape", help="an index into the op's bench shapes, or k=v,k=v (default: the first)")
    parser.add_argument("--dtype", help="default: the op's first bench dtype")
    parser.add_argument("--impl", action="append", help="only this candidate or baseline (repeatable)")
    parser.add_argument("--set", dest="set_name", default="basic", choices=SETS)
    parser.add_argument("--kernel", help="only kernels whose function name matches this regular expression")
    parser.add_argument("--trace", action="store_true", help="a torch.profiler trace per implementation instead")
    parser.add_argument("--out", type=Path, help="the run's folder (default results/<date>-<time>-<gpu>)")
    parser.add_argument("--kernels", type=Path, help="the kernels folder (default: kernels/)")
    parser.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trace-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.kernels.resolve() if args.kernels else KERNELS
    try:
        if args.launch:
            return launch(root, args.op, args.impl[0], json.loads(args.shape), args.dtype, args.trace_to)
        folder = run(root, args.op, shape=args.shape, dtype=args.dtype, impls=args.impl, set_name=args.set_name,
                     kernel=args.kernel, trace=args.trace, out=args.out)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print((folder / "summary.md").read_text(), end="")
    print(f"profile: {_shown(folder)}/ (summary.md, profile.json and the reports)")
    return 0


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
