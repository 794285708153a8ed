"""The timing engine: one function, `measure`, with defaults worth trusting.

On a GPU every sample is bracketed by CUDA events on the current stream, after a flush of L2
(writing a buffer twice the device's L2 size), so each sample starts cold. Between the flush
and the start event a spin kernel holds the stream for about twice the function's host-side
launch time (measured per function): the GPU reaches the start event only once the whole call
is queued, so Python and dispatcher overhead (torch.compile guards, Triton launchers, the
many launches of an unfused baseline) stay out of the GPU time. That host time is reported
per function (`host_ms`) instead, so a CPU-bound function is still visible. Functions measured
together are interleaved (A B, B A, ...) so clock drift and thermal changes hit all of them
alike. Without a GPU the same loop runs on `time.perf_counter` and says so in `timer`.

Each function stops on its own once it has at least `min_samples` samples and `min_time_s` of
measured time AND its relative stdev is under `max_rel_stdev` or its noise estimate has
plateaued; whatever is still running after `timeout_s` per function stops with reason "timeout".
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..errors import UsageError
from . import stats

Fn = Callable[[], Any]

#: Spin-kernel sizing: cycles used to calibrate torch.cuda._sleep, slack on top of twice the
#: host launch time, and a cap for functions whose host time is not launch overhead (a sync inside).
SPIN_PROBE_CYCLES = 1_000_000
SPIN_MARGIN_MS = 0.01
MAX_SPIN_MS = 2.0


@dataclass(frozen=True)
class Settings:
    """How long and how carefully to measure. docs/bench.md describes the defaults."""

    min_samples: int = 10
    min_time_s: float = 0.5         # of measured time, per function
    max_rel_stdev: float = 0.01     # stdev / mean under which a function has converged
    timeout_s: float = 10.0         # wall clock, per function measured
    flush_factor: float = 2.0       # L2 flush buffer = this x the device's L2 size
    round_s: float = 0.05           # wall time between synchronisations (stop checks)
    graph_below_ms: float = 0.010   # medians under this also get a CUDA-graph figure
    graph_calls: int = 20           # calls captured in one graph
    graph_replays: int = 25
    # Cases with any median under graph_below_ms are measured this many times in all, each further time a
    # fresh interleaved measurement (its own spins, its own order) of min_time_s / tiny_repeats: a 3 us kernel's
    # ratio to another moved by +-5% between measurements whose own intervals said +-1% (H200, 4 rows of 8192).
    tiny_repeats: int = 5

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


DEFAULT = Settings()
#: `--quick`: a sanity pass, not a figure to publish.
QUICK = replace(DEFAULT, min_time_s=0.05, timeout_s=1.0, graph_replays=10, tiny_repeats=1)


def min_time_seconds(value: str) -> float:
    """`--min-time` as seconds: a finite number more than 0, else a UsageError naming what was given."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise UsageError(f"--min-time is seconds of measured time per function, a number more than 0; got {value!r}.")
    return seconds


def with_min_time(settings: Settings, seconds: float) -> Settings:
    """`--min-time`: settings measuring each function for at least `seconds`, with the timeout scaled alike
    (20 times it, as the defaults' 0.5 s and 10 s; at least 1 s)."""
    return replace(settings, min_time_s=seconds, timeout_s=max(1.0, 20 * seconds))


@dataclass
class Measurement:
    """Raw samples of one function and how the measurement ended."""

    name: str
    timer: str                      # "cuda-events" or "cpu-perf-counter"
    first_call_ms: float            # the untimed first call (compilation, lazy loading), wall clock
    samples_ms: list[float] = field(default_factory=list)
    stop_reason: str = ""           # "converged", "plateau" or "timeout"
    host_ms: float | None = None    # host time to launch one call (GPU only): over the GPU time = CPU-bound
    graph_ms: float | None = None   # per call, CUDA-graph replay, L2 flushed (tiny kernels only)
    graph_note: str = ""

    @property
    def summary(self) -> stats.Summary:
        return stats.summarize(self.samples_ms)

    @property
    def median_ms(self) -> float:
        return self.summary.median


def measure(fns: Mapping[str, Fn], settings: Settings = DEFAULT, *, device: str = "cuda",
            setups: Mapping[str, Fn] | None = None) -> dict[str, Measurement]:
    """Time each function (no arguments) interleaved with the others; return raw samples per name.

    `setups[name]`, where given, runs before every call of that function, untimed (before the L2 flush): a
    backward's forward, whose graph each backward call consumes.
    """
    timer: _Timer = _CudaTimer(settings) if device.startswith("cuda") else _CpuTimer()
    timer.setups = dict(setups or {})
    results = {name: Measurement(name, timer.label, timer.first_call(fn, name)) for name, fn in fns.items()}
    for name, fn in fns.items():
        results[name].host_ms = timer.prepare(name, fn)
    running = {name: stats.Running() for name in fns}
    noise: dict[str, list[float]] = {name: [] for name in fns}
    active = list(fns)
    deadline = time.perf_counter() + settings.timeout_s * len(fns)
    count = settings.min_samples
    while active:
        batch = timer.round([(name, fns[name]) for name in active], count)
        for name in active:
            for x in batch[name]:
                running[name].add(x)
            results[name].samples_ms.extend(batch[name])
            noise[name].append(running[name].rel_stdev)
        timed_out = time.perf_counter() > deadline
        for name in list(active):
            reason = _stop_reason(running[name], noise[name], settings) or ("timeout" if timed_out else None)
            if reason:
                results[name].stop_reason = reason
                active.remove(name)
        # Size the next round so that it lasts about round_s: few syncs, yet timely stop checks.
        per_sample_ms = sum(running[n].total / running[n].n + timer.overhead_ms(n) for n in active)
        if per_sample_ms > 0:
            count = max(1, min(2000, int(settings.round_s * 1e3 / per_sample_ms)))
    for result in results.values():
        if result.name in timer.setups and result.median_ms < settings.graph_below_ms:
            result.graph_note = "no CUDA graph figure: every call needs its own untimed setup (a backward's forward)"
        elif isinstance(timer, _CudaTimer) and result.median_ms < settings.graph_below_ms:
            result.graph_ms, result.graph_note = timer.graph_ms(fns[result.name], settings)
    return results


def measure_repeated(fns: Mapping[str, Fn], settings: Settings = DEFAULT, *, device: str = "cuda",
                     setups: Mapping[str, Fn] | None = None) -> list[dict[str, Measurement]]:
    """`measure`, then, where any median came out under `graph_below_ms`, `tiny_repeats - 1` more measurements of
    `min_time_s / tiny_repeats` each (no graph figures): the first measurement's, then the others' (fewer where a
    later one failed)."""
    first = measure(fns, settings, device=device, setups=setups)
    if settings.tiny_repeats < 2 or all(m.median_ms >= settings.graph_below_ms for m in first.values()):
        return [first]
    short = replace(settings, min_time_s=settings.min_time_s / settings.tiny_repeats, graph_below_ms=0.0)
    out = [first]
    for _ in range(settings.tiny_repeats - 1):
        try:
            out.append(measure(fns, short, device=device, setups=setups))
        except Exception:  # e.g. out of memory: the measurements made stand (a row says how many there were)
            break
    return out


def do_bench(fn: Fn, settings: Settings = DEFAULT, *, device: str = "cuda") -> Measurement:
    """Time one function; the single-function form of `measure`."""
    return measure({"fn": fn}, settings, device=device)["fn"]


def _stop_reason(run: stats.Running, noise: list[float], s: Settings) -> str | None:
    if run.n < s.min_samples or run.total / 1e3 < s.min_time_s:
        return None
    if noise[-1] < s.max_rel_stdev:
        return "converged"
    if stats.plateaued(noise):
        return "plateau"
    return None


class _Timer:
    """Interleaves functions sample by sample, reversing the order every pass (A B, B A, ...)."""

    label = ""
    _flip = False
    setups: dict[str, Fn] = {}

    def setup(self, name: str | None) -> None:
        """Run name's untimed setup, if it has one (before the flush: it does not warm the cache)."""
        if name in self.setups:
            self.setups[name]()

    def sync(self) -> None:
        pass

    def prepare(self, name: str, fn: Fn) -> float | None:
        """Get ready to sample fn (after its first call); may return its host launch time."""
        return None

    def overhead_ms(self, name: str) -> float:
        """GPU time spent per sample outside the timed region (flush, spin)."""
        return 0.0

    def sample(self, name: str, fn: Fn) -> Any:
        raise NotImplementedError

    def resolve(self, marks: list[Any]) -> list[float]:
        raise NotImplementedError

    def first_call(self, fn: Fn, name: str | None = None) -> float:
        self.setup(name)
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def round(self, order: list[tuple[str, Fn]], count: int) -> dict[str, list[float]]:
        names: list[str] = []
        marks: list[Any] = []
        for _ in range(count):
            for name, fn in order[::-1] if self._flip else order:
                names.append(name)
                marks.append(self.sample(name, fn))
            self._flip = not self._flip
        out: dict[str, list[float]] = {name: [] for name, _ in order}
        for name, ms in zip(names, self.resolve(marks)):
            out[name].append(ms)
        return out


class _CpuTimer(_Timer):
    label = "cpu-perf-counter"

    def sample(self, name: str, fn: Fn) -> float:
        self.setup(name)
        t0 = time.perf_counter()
        fn()
        return round((time.perf_counter() - t0) * 1e3, 6)

    def resolve(self, marks: list[Any]) -> list[float]:
        return marks


class _CudaTimer(_Timer):
    label = "cuda-events"

    def __init__(self, settings: Settings):
        import torch

        self.torch = torch
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        # Older torch builds do not expose L2_cache_size; 128 MiB covers every GPU made so far.
        l2 = getattr(props, "L2_cache_size", 0) or 128 << 20
        self.cache = torch.empty(int(settings.flush_factor * l2), dtype=torch.int8, device="cuda")
        self.flush_ms = self._time_gpu(self.flush)
        # torch.cuda._sleep is private; without it samples are still right when launches are cheap.
        self.spin: Callable[[int], None] | None = getattr(torch.cuda, "_sleep", None)
        self.cycles_per_ms = 0.0
        if self.spin is not None:
            spin = self.spin
            self.cycles_per_ms = SPIN_PROBE_CYCLES / self._time_gpu(lambda: spin(SPIN_PROBE_CYCLES))
        self.spin_ms: dict[str, float] = {}

    def flush(self) -> None:
        self.cache.zero_()

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def prepare(self, name: str, fn: Fn) -> float:
        """Measure fn's host launch time; size its spin so the GPU waits until the call is queued."""
        host = []
        for _ in range(3):
            self.setup(name)
            self.sync()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
        self.sync()
        host_ms = sorted(host)[1]
        # The flush already holds the GPU for flush_ms; spin for the rest of 2x the launch time.
        self.spin_ms[name] = min(MAX_SPIN_MS, max(0.0, 2 * host_ms + SPIN_MARGIN_MS - self.flush_ms))
        return host_ms

    def overhead_ms(self, name: str) -> float:
        return self.flush_ms + self.spin_ms.get(name, 0.0)

    def sample(self, name: str, fn: Fn) -> Any:
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        self.setup(name)
        self.flush()
        spin_cycles = int(self.spin_ms.get(name, 0.0) * self.cycles_per_ms)
        if spin_cycles > 0 and self.spin is not None:
            self.spin(spin_cycles)
        start.record()
        fn()
        end.record()
        return start, end

    def resolve(self, marks: list[Any]) -> list[float]:
        # One synchronisation per round: the CPU stays ahead of the GPU while samples are taken.
        self.sync()
        return [round(start.elapsed_time(end), 6) for start, end in marks]  # events resolve ~0.5 us

    def _time_gpu(self, work: Fn, repeat: int = 5) -> float:
        Event = self.torch.cuda.Event
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        work()
        start.record()
        for _ in range(repeat):
            work()
        end.record()
        self.torch.cuda.synchronize()
        return start.elapsed_time(end) / repeat

    def graph_ms(self, fn: Fn, s: Settings) -> tuple[float | None, str]:
        """Per-call time of a graph replaying [flush, fn] x N, minus a graph of [flush] x N.

        A graph removes launch gaps; keeping the flush inside keeps the figure cold (graph timing
        over a warm L2 overstates bandwidth, ~1.6x seen on an H100).
        """
        torch = self.torch
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # capture wants a warmed-up function on a side stream
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            both, flush_only = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(both):
                for _ in range(s.graph_calls):
                    self.flush()
                    fn()
            with torch.cuda.graph(flush_only):
                for _ in range(s.graph_calls):
                    self.flush()
        except Exception as e:  # any capture failure only loses this extra figure
            torch.cuda.synchronize()
            return None, f"not capturable: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        graphs = [("both", both.replay), ("flush", flush_only.replay)]
        times = self.round(graphs, s.graph_replays)
        per_call = (stats.summarize(times["both"]).median - stats.summarize(times["flush"]).median) / s.graph_calls
        return per_call, f"CUDA graph of {s.graph_calls} calls with L2 flushes, flush time subtracted"
