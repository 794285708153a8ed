"""One benchmark run: check every op, time the correct ones against their baselines, stamp it all.

For each op (kernels/<op>/), each bench shape and dtype: inputs from the op's seed, the reference
output, then every candidate and baseline is checked against it; a wrong or failing one gets a
row that says why and no timing. The rest are timed together (interleaved) by `timing.measure`,
then placed under the measured roofline and compared with each baseline.
"""
from __future__ import annotations

import datetime as dt
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from .. import ROOT, progress
from ..errors import BenchError
from ..ops import extensions
from . import clocks, environment, gate, gpu_mutex, report, results, roofline, stats, systems, timing


@dataclass(frozen=True)
class Options:
    """What `python -m kernellab.bench` was asked to do."""

    select: str | None = None       # -k: which ops
    quick: bool = False             # first bench shape only, short measurements
    out: Path | None = None         # the run's folder; default results/<date>-<gpu>
    refresh_calibration: bool = False
    system: str | None = None       # a recipe's offer of baselines (bench.systems.Offer as JSON): --against
    min_time_s: float | None = None  # --min-time: measured time per function, instead of the settings' own


@dataclass
class Context:
    """What every case of one run shares."""

    device: str                     # "cuda" or "cpu"
    settings: timing.Settings
    quick: bool
    peaks: dict[str, Any] | None    # measured roofline peaks (GPU runs)
    monitor: clocks.ClockMonitor
    progress: Progress
    max_sm_mhz: float | None = None
    system: systems.System | None = None   # a published system, a baseline beside PyTorch's for the ops it offers
    #: Per op, what it compiled (the catalog's kernel_sources, read just before the op is built): results.json's
    #: `sources`, so that a result names its kernel code where the checkout's commit does not.
    sources: dict[str, Any] = field(default_factory=dict)


def run(options: Options, *, catalog: Any = None, log: IO[str] | None = None) -> tuple[dict[str, Any], Path]:
    """Benchmark the selected ops; write results.json, results.csv, summary.md and plots.

    `catalog` is the module that finds and loads ops (kernellab.ops unless a test passes another).
    Returns the results document and the folder it was written to.
    """
    log = log or sys.stderr
    if catalog is None:
        from ..ops import library as catalog
    torch = _torch()
    specs = catalog.discover(select=options.select)
    if not specs:
        raise BenchError(f"no op matches -k {options.select!r}; the ops are the folders under kernels/.")
    system = systems.load(systems.Offer.from_json(options.system)) if options.system else None
    if system:
        specs = [s for s in specs if s.name in system.baselines]
        if not specs:
            raise BenchError(f"recipe {system.offer.name} offers baselines for {', '.join(system.baselines)}, which "
                             f"-k {options.select!r} does not select.")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = timing.QUICK if options.quick else timing.DEFAULT
    if options.min_time_s is not None:
        settings = timing.with_min_time(settings, options.min_time_s)
    env, probe = describe(torch)
    gpu = env["gpu"]
    started = dt.datetime.now(dt.timezone.utc)
    name = options.out.name if options.out else run_name(started, gpu["name"] if gpu else None)
    folder = options.out or ROOT / "results" / name
    cache = extensions.cache_root()
    key = (gpu or {}).get("uuid") or f"cpu-{env['host']}"
    doc: dict[str, Any] = {
        "schema": results.SCHEMA, "run": name, "started": started.isoformat(timespec="seconds"),
        "argv": sys.argv, "select": options.select, "quick": options.quick,
        "timer": "cuda-events" if device == "cuda" else "cpu-perf-counter",
        "settings": settings.to_dict(), "environment": env, "peaks": None,
        "datasheet": roofline.datasheet(gpu["name"]) if gpu else None, "rows": [], "warnings": [],
    }
    if system:
        doc["systems"] = {system.offer.name: system.to_dict()}
    with gpu_mutex.exclusive_gpu(cache, key, label=f"{gpu['name']} {key}" if gpu else key, out=log):
        if device == "cuda":
            print("calibrating peaks (copy bandwidth, cuBLAS GEMM) ...", file=log, flush=True)
            doc["peaks"] = roofline.calibrate(cache, key, (gpu or {}).get("driver"),
                                              refresh=options.refresh_calibration)
        progress = Progress(sum(len(_shapes(s, options.quick)) * len(s.bench_dtypes) for s in specs), log)
        t0 = time.perf_counter()
        with clocks.ClockMonitor(probe) as monitor:
            ctx = Context(device, settings, options.quick, doc["peaks"], monitor, progress,
                          ((gpu or {}).get("clocks") or {}).get("max_sm_mhz"), system)
            for spec in specs:
                doc["rows"] += bench_op(spec, catalog, ctx)
        progress.close()
        doc["sources"] = ctx.sources
        doc["clock_samples"] = clocks.raw(monitor.samples, t0)
    doc["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    doc["warnings"] = _warnings(doc, monitor.errors)
    report.write(folder, doc)
    return doc, folder


def describe(torch: Any) -> tuple[dict[str, Any], clocks.Probe | None]:
    """The environment stamp, and the clock reader of the GPU (None without a GPU or a reader)."""
    if not torch.cuda.is_available():
        return environment.collect(gpu=None), None
    uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", "") or "")
    probe, why = clocks.open_probe(uuid) if uuid else (None, "torch reports no GPU UUID")
    env = environment.collect(gpu=environment.gpu_facts(probe.facts() if probe else None))
    env["clock_source"] = probe.source if probe else f"none ({why})"
    env["clock_lock"] = clocks.clock_lock(env["gpu"].get("clocks") or {})
    return env, probe


def bench_op(spec: Any, catalog: Any, ctx: Context) -> list[dict[str, Any]]:
    """Rows for every bench shape and dtype of one op (one row per implementation)."""
    progress = ctx.progress
    cases = [(shape, dtype) for shape in _shapes(spec, ctx.quick) for dtype in spec.bench_dtypes]
    if spec.needs_gpu and ctx.device != "cuda":
        progress.skip(len(cases))
        return [_row(spec, shape, dtype, "all", "-", "skipped", "no CUDA GPU visible to PyTorch")
                for shape, dtype in cases]
    try:
        sources = getattr(catalog, "kernel_sources", None)  # a test's catalog of fake ops may have none
        if sources is not None:
            ctx.sources[spec.name] = sources(spec)
        t0 = time.perf_counter()
        module = catalog.load(spec)
        load_s = time.perf_counter() - t0
        if ctx.system and spec.name in ctx.system.baselines:  # the published system, checked and timed as any baseline
            module.baselines[ctx.system.offer.name] = ctx.system.baselines[spec.name]
    except Exception as e:  # one op failing to build must not stop the others
        progress.skip(len(cases))
        return [_row(spec, shape, dtype, "all", "-", "error", f"load failed: {gate.oneline(e)}") for shape, dtype in cases]
    rows = []
    for shape, dtype in cases:
        progress.step(f"{spec.name} {results.shape_label(shape)} {dtype}")
        case_rows = bench_case(spec, module, shape, dtype, ctx)
        for row in case_rows:
            row["load_s"] = round(load_s, 3)
        progress.result(case_rows)
        rows += case_rows
    return rows


def bench_case(spec: Any, module: Any, shape: dict[str, int], dtype: str, ctx: Context) -> list[dict[str, Any]]:
    """Check, then time, every candidate and baseline of one op at one shape and dtype, in each of the op's
    passes (forward; backward and full where op.toml declares a [backward]): rows carry their `pass`."""
    # A CPU op is timed on the CPU even where a GPU is present; its rows say so in `timer`.
    device = "cpu" if spec.kind == "cpu" else ctx.device
    which_passes = getattr(spec, "passes", ("forward",))
    try:
        case = gate.Case(spec, module, shape, dtype, device)
    except Exception as e:  # a shape the op cannot make is a row, not a crash
        return [_row(spec, shape, dtype, n, role, "error", f"inputs/reference failed: {gate.oneline(e)}", which)
                for which in which_passes for n, role, _ in _impls(module, which)]
    rows: list[dict[str, Any]] = []
    for which in which_passes:
        rows += bench_pass(case, which, ctx)
    return rows


def _impls(module: Any, which: str, case: gate.Case | None = None) -> list[tuple[str, str, Callable[..., Any] | None]]:
    """(name, role, function) of every implementation in pass `which`: a candidate's differentiable form for
    backward and full (None: it has no backward), the baselines as they are (autograd differentiates them)."""
    if which == "forward":
        cands: list[tuple[str, str, Callable[..., Any] | None]] = [(n, "candidate", f) for n, f in module.candidates.items()]
    else:
        backwards = getattr(module, "backwards", {})
        cands = [(n, "candidate", module.differentiable(n, case.inputs) if case and n in backwards else None)
                 for n in module.candidates]
    return cands + [(n, "baseline", f) for n, f in module.baselines.items()]


def bench_pass(case: gate.Case, which: str, ctx: Context) -> list[dict[str, Any]]:
    """Check, then time, every implementation in one pass of one case (interleaved), with speedups in the pass."""
    spec, module, shape, dtype, device = case.spec, case.module, case.shape, case.dtype, case.device
    impls = _impls(module, which, case)
    rows: dict[str, dict[str, Any]] = {}
    for name, reason in getattr(module, "unavailable", {}).items():  # op.toml's `requires`, not met here
        rows[name] = _row(spec, shape, dtype, name, "candidate", "skipped", reason, which)
    fns: dict[str, timing.Fn] = {}
    setups: dict[str, timing.Fn] = {}  # a backward's forward, run before each call, untimed
    for name, role, fn in impls:
        if fn is None:
            rows[name] = _row(spec, shape, dtype, name, role, "skipped",
                              "no backward: op.toml's [backward] candidates do not name it", which)
            continue
        t0 = time.perf_counter()
        status, reason = case.check(name, fn, which)
        rows[name] = _row(spec, shape, dtype, name, role, status, reason, which)
        # The check is the very first call: JIT and torch.compile time show here, not in samples.
        rows[name]["first_call_ms"] = (time.perf_counter() - t0) * 1e3
        if status == "ok":
            try:
                fns[name], setup = case.call(fn, which)
                if setup is not None:
                    setups[name] = setup
            except Exception as e:  # e.g. out of memory keeping a graph for the backward
                rows[name].update(status="error", reason=f"preparing the {which} pass failed: {gate.oneline(e)}")
    if not fns:
        return list(rows.values())
    t0 = time.perf_counter()
    try:
        repeats = timing.measure_repeated(fns, ctx.settings, device=device, setups=setups)
    except Exception as e:  # e.g. out of memory at the largest shape
        for name in fns:
            rows[name].update(status="error", reason=f"timing failed: {gate.oneline(e)}")
        return list(rows.values())
    measured = repeats[0]
    window = clocks.summarize_window(ctx.monitor.window(t0, time.perf_counter()), ctx.max_sm_mhz)
    nbytes, flops = _work(spec, shape, dtype, which)
    for name, m in measured.items():
        if len(repeats) > 1:  # a tiny case: every measurement's median (the first's included) beside its full figures
            rows[name]["repeat_medians_ms"] = [r[name].median_ms for r in repeats]
        summary = m.summary
        rows[name].update(
            timer=m.timer, samples_ms=m.samples_ms, stats=summary.to_dict(), stop_reason=m.stop_reason,
            warmup_ms=m.first_call_ms, host_ms=m.host_ms, graph_ms=m.graph_ms, graph_note=m.graph_note,
            bytes=nbytes, flops=flops, clocks=window,
            **roofline.metrics(nbytes, flops, summary.median, dtype, ctx.peaks if device != "cpu" else None),
        )
    baselines = [n for n, role, _ in impls if role == "baseline" and n in measured]
    for name, role, _ in impls:
        if name not in measured:
            continue
        speedups = {}
        if role == "candidate":
            speedups = {b: stats.ratio_over_repeats([(r[b].samples_ms, r[name].samples_ms) for r in repeats])
                        for b in baselines}
            rows[name]["speedups"] = {b: r.to_dict() for b, r in speedups.items()}
        rows[name]["suspect"] = roofline.suspicions(rows[name].get("pct_peak"),
                                                    {b: r.value for b, r in speedups.items()})
    return list(rows.values())


def _work(spec: Any, shape: dict[str, int], dtype: str, which: str) -> tuple[int, int]:
    """Bytes and FLOPs of pass `which` (op.toml's formulas: the full pass is forward + backward)."""
    if which == "forward":
        return spec.bytes_moved(shape, dtype), spec.flops(shape, dtype)
    return spec.bytes_moved(shape, dtype, which), spec.flops(shape, dtype, which)


#: The forward's correctness gate, by its old name here (kernellab.bench.gate).
check = gate.check


class Progress:
    """One bar over all cases on a terminal (kernellab.progress), one line per case in a log."""

    def __init__(self, total: int, out: IO[str]):
        self.bar = progress.Bar(max(total, 1), "bench", unit="case", out=out)
        self.label = ""

    def step(self, label: str) -> None:
        self.label = label
        if self.bar.tty:
            self.bar.step(label)
        else:
            self.bar.done += 1  # the result line says it

    def skip(self, n: int) -> None:
        if self.bar.tty:
            self.bar.update_to(self.bar.done + n)
        else:
            self.bar.done += n

    def result(self, rows: list[dict[str, Any]]) -> None:
        parts = []
        for r in rows:
            impl = r["impl"] + ("" if r.get("pass", "forward") == "forward" else f" {r['pass']}")
            if r["status"] == "ok":
                parts.append(f"{impl} {results.fmt_time(r['stats']['median'])}")
            else:
                parts.append(f"{impl} {r['status']}")
        self.bar.write(f"[{self.bar.done}/{self.bar.total}] {self.label}: " + ", ".join(parts))

    def close(self) -> None:
        self.bar.close()


def _warnings(doc: dict[str, Any], clock_errors: list[str]) -> list[str]:
    out = []
    if doc["timer"] != "cuda-events":
        out.append("CPU timing (no CUDA GPU visible to PyTorch): figures are wall-clock, not comparable with GPU runs")
    if (doc["environment"].get("gpu") and not str(doc["environment"].get("clock_source", "")).startswith(("nvml", "nvidia-smi"))):
        out.append(f"clocks were not sampled: {doc['environment']['clock_source']}")
    out += [f"clock reader failed during the run: {e}" for e in clock_errors]
    for row in doc["rows"]:
        where = f"{row['op']} {results.shape_label(row['shape'])} {row['dtype']} {results.impl_label(row)}"
        c = row.get("clocks") or {}
        if c.get("sagged"):
            out.append(f"{where}: SM clock sagged to {c['sm_mhz_median']:.0f} MHz "
                       f"(< {clocks.SAG_FRACTION:.0%} of max; reasons: {', '.join(c['reasons']) or 'none'})")
        if row.get("suspect"):
            out.append(f"{where}: suspect result ({'; '.join(row['suspect'])}); check bytes/FLOPs and the kernel")
        if row["status"] in ("wrong", "error"):
            out.append(f"{where}: {row['status']}, not timed ({row['reason']})")
    return out


def _row(spec: Any, shape: dict[str, int], dtype: str, impl: str, role: str, status: str, reason: str,
         which: str = "forward") -> dict[str, Any]:
    return {"op": spec.name, "kind": spec.kind, "shape": dict(shape), "dtype": dtype, "impl": impl, "pass": which,
            "role": role, "status": status, "reason": reason}


def _shapes(spec: Any, quick: bool) -> list[dict[str, int]]:
    return list(spec.bench_shapes[:1] if quick else spec.bench_shapes)


def run_name(started: dt.datetime, gpu: str | None) -> str:
    """A run's folder name under results/: its start time and the GPU (`invoke profile` names its runs so too)."""
    what = re.sub(r"[^a-z0-9]+", "-", (gpu or "cpu").lower()).strip("-")
    return f"{started.astimezone().strftime('%Y%m%d-%H%M%S')}-{what}"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise BenchError("torch is not installed here; run the benchmark in a kernellab image "
                         "(`invoke bench`) or install torch for --native.") from None
    return torch
