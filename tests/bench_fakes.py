"""Tiny stand-ins for kernellab.ops, so the bench engine is tested without kernels or a GPU, and
a clock and result documents with known noise, so no verdict depends on this machine's speed or load.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch

from kernellab.bench import results, stats, timing


@dataclass(frozen=True)
class FakeSpec:
    name: str
    kind: str = "cpu"
    bench_shapes: list[dict[str, int]] = field(default_factory=lambda: [{"n": 4096}, {"n": 8192}])
    bench_dtypes: list[str] = field(default_factory=lambda: ["float32"])
    seeds: list[int] = field(default_factory=lambda: [0])
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=lambda: ["eager"])
    path: Path = Path("kernels/fake")
    description: str = "a fake op"

    def bytes_moved(self, shape: dict[str, int], dtype: str) -> int:
        return 3 * shape["n"] * 4

    def flops(self, shape: dict[str, int], dtype: str) -> int:
        return shape["n"]

    @property
    def needs_gpu(self) -> bool:
        return self.kind != "cpu"


class FakeClock:
    """Stands in for the `time` module of kernellab.bench.timing: time moves only when a fake kernel
    runs (or something sleeps), so every sample is exactly what the test scripted."""

    def __init__(self) -> None:
        self.now = 1000.0  # seconds; any start will do

    def perf_counter(self) -> float:
        return self.now

    monotonic = time = perf_counter

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1e3


def use_fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Time the timing loop on a FakeClock (the rest of the process keeps the real clock)."""
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    return clock


def takes(clock: FakeClock, durations: Callable[[], float], fn: Callable[..., Any] = lambda *a: None,
          calls: list[str] | None = None, name: str = "") -> Callable[..., Any]:
    """fn, made to take `durations()` milliseconds of fake time per call (and to log its name in calls)."""
    def run(*args: Any) -> Any:
        if calls is not None:
            calls.append(name)
        clock.advance_ms(durations())
        return fn(*args)
    return run


def noisy(median_ms: float, rel_noise: float, seed: int = 0) -> Callable[[], float]:
    """Durations around median_ms with a known relative spread (normal, never below 90% of the median)."""
    rng = random.Random(seed)
    return lambda: max(0.9 * median_ms, rng.gauss(median_ms, rel_noise * median_ms))


#: Fake time per call in a run over fake ops: the candidates take half the eager baseline's time.
FAKE_MS = {"kernellab": 0.5, "broken": 0.5, "raises": 0.5, "mutates": 0.5, "eager": 1.0}
FAKE_NOISE = 0.01


class FakeModule:
    """vector add: `kernellab` is right, `broken` is off by one, `raises` raises.

    With a clock, each implementation takes FAKE_MS of fake time per call, with FAKE_NOISE spread.
    """

    def __init__(self, spec: FakeSpec, candidates: dict[str, Callable[..., Any]], clock: FakeClock | None = None):
        self.spec = spec
        self.candidates = candidates
        self.baselines: dict[str, Callable[..., Any]] = {"eager": torch.add}
        if clock is not None:
            for seed, impls in enumerate((self.candidates, self.baselines)):
                for i, (name, fn) in enumerate(impls.items()):
                    impls[name] = takes(clock, noisy(FAKE_MS.get(name, 1.0), FAKE_NOISE, seed=10 * seed + i), fn)

    def make_inputs(self, shape: dict[str, int], dtype: str, device: str, seed: int) -> tuple:
        g = torch.Generator().manual_seed(seed)
        dt = getattr(torch, dtype)
        return (torch.randn(shape["n"], generator=g).to(device, dt),
                torch.randn(shape["n"], generator=g).to(device, dt))

    def reference(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x.double() + y.double()).to(x.dtype)


def _raises(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("kernel launch failed: invalid configuration argument")


def _mutates(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.add_(y)


CANDIDATES: dict[str, Callable[..., Any]] = {
    "kernellab": lambda x, y: x + y,
    "broken": lambda x, y: x + y + 1,
    "raises": _raises,
    "mutates": _mutates,
}


def catalog(specs: list[FakeSpec] | None = None, candidates: dict[str, Callable[..., Any]] | None = None,
            failing: tuple[str, ...] = (), clock: FakeClock | None = None) -> SimpleNamespace:
    """An object with the `discover` and `load` functions of kernellab.ops (timed on `clock` if given)."""
    specs = specs if specs is not None else [FakeSpec("vadd"), FakeSpec("gpu_only", kind="cuda")]

    def discover(root: Any = None, select: str | None = None) -> list[FakeSpec]:
        return [s for s in specs if select is None or select in s.name]

    def load(spec: FakeSpec, *, verbose: bool = False) -> FakeModule:
        if spec.name in failing:
            raise RuntimeError("nvcc: error: identifier 'blockIdx' is undefined")
        return FakeModule(spec, dict(candidates if candidates is not None else CANDIDATES), clock)

    return SimpleNamespace(discover=discover, load=load)


# --- synthetic results, for compare -----------------------------------------------------------

def samples(median_ms: float, rel_noise: float = 0.005, n: int = 200, seed: int = 0) -> list[float]:
    """n timing samples around median_ms with a known relative spread (seeded)."""
    rng = random.Random(seed)
    return [rng.gauss(median_ms, rel_noise * median_ms) for _ in range(n)]


def row(op: str, impl: str, median_ms: float | None, *, role: str = "candidate", rel_noise: float = 0.005,
        seed: int = 0, shape: dict[str, int] | None = None, dtype: str = "float16", timer: str = "cuda-events",
        status: str = "ok") -> dict[str, Any]:
    """One results.json row, timed from synthetic samples (or, with status != "ok", untimed)."""
    out: dict[str, Any] = {"op": op, "kind": "cuda", "shape": dict(shape or {"n": 4096}), "dtype": dtype,
                           "impl": impl, "role": role, "status": status, "reason": "" if status == "ok" else "broken"}
    if status == "ok" and median_ms is not None:
        xs = samples(median_ms, rel_noise, seed=seed)
        out.update(timer=timer, samples_ms=xs, stats=stats.summarize(xs).to_dict())
    return out


def h100(uuid: str = "GPU-0b7a", driver: str = "570.86.15", max_sm_mhz: int = 1980) -> dict[str, Any]:
    """The environment stamp of one H100 (only what compare reads, and a little more)."""
    return {"host": "gpu-host", "torch": "2.11.0", "cuda_runtime": "13.0", "triton": "3.5.0", "image": "native",
            "gpu": {"name": "NVIDIA H100 80GB HBM3", "uuid": uuid, "compute_capability": "9.0", "sm_count": 132,
                    "driver": driver, "clocks": {"source": "nvml", "max_sm_mhz": max_sm_mhz, "max_mem_mhz": 2619,
                                                 "app_sm_mhz": 1755, "default_app_sm_mhz": 1755}},
            "clock_lock": {"locked": False, "evidence": "application clocks at default"}}


def run_doc(name: str, rows: list[dict[str, Any]], environment: dict[str, Any] | None = None,
            select: str | None = None) -> dict[str, Any]:
    """A results.json document around synthetic rows."""
    return {"schema": results.SCHEMA, "run": name, "select": select, "quick": False, "timer": "cuda-events",
            "settings": timing.DEFAULT.to_dict(), "environment": copy.deepcopy(environment or h100()),
            "peaks": None, "datasheet": None, "rows": rows, "warnings": []}
