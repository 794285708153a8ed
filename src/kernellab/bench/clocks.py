"""GPU clocks and throttle reasons, read through NVML (pynvml) or else `nvidia-smi`.

A background `ClockMonitor` samples while kernels run, so a result can say whether the SM clock
sagged (power or thermal limits) while it was measured. Which source was used is recorded.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .. import proc
from ..errors import KernellabError

#: NVML's clocks-event (throttle) reason bits; nvidia-smi prints the same mask in hex.
REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
#: A median SM clock under this fraction of the maximum is reported as a sag (docs/bench.md).
SAG_FRACTION = 0.9


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


@dataclass(frozen=True)
class ClockSample:
    t: float               # time.perf_counter() when read
    sm_mhz: float
    mem_mhz: float
    reasons: int
    temp_c: float | None = None
    power_w: float | None = None


class Probe(Protocol):
    source: str

    def read(self) -> ClockSample: ...

    def facts(self) -> dict[str, Any]: ...


class NvmlProbe:
    """Reads one GPU through pynvml (package nvidia-ml-py); cheap enough to poll every 50 ms."""

    source = "nvml"
    interval_s = 0.05

    def __init__(self, uuid: str):
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(_nvml_uuid(uuid))
        # Drivers before r535 only have the older name of the same call.
        self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(self) -> ClockSample:
        nv, h = self.nv, self.handle
        return ClockSample(
            t=time.perf_counter(),
            sm_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            mem_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            reasons=int(self._reasons(h)),
            temp_c=_maybe(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            power_w=_maybe(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
        )

    def facts(self) -> dict[str, Any]:
        nv, h = self.nv, self.handle
        driver = nv.nvmlSystemGetDriverVersion()
        return {
            "source": self.source,
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "max_sm_mhz": _maybe(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            "max_mem_mhz": _maybe(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            "app_sm_mhz": _maybe(lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
            "default_app_sm_mhz": _maybe(lambda: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_SM)),
            "minor_number": _maybe(lambda: nv.nvmlDeviceGetMinorNumber(h)),
        }


class SmiProbe:
    """Reads one GPU by running `nvidia-smi --query-gpu` (slow: polled twice a second)."""

    source = "nvidia-smi"
    interval_s = 0.5
    FIELDS = ("clocks.sm", "clocks.mem", "{reasons}", "temperature.gpu", "power.draw")

    def __init__(self, uuid: str):
        self.uuid = _nvml_uuid(uuid)
        self.reasons_field = "clocks_event_reasons.active"
        try:
            self.read()
        except KernellabError:
            self.reasons_field = "clocks_throttle_reasons.active"  # drivers before r535
            self.read()

    def _query(self, fields: list[str]) -> list[str]:
        out = proc.run(["nvidia-smi", "-i", self.uuid, f"--query-gpu={','.join(fields)}",
                        "--format=csv,noheader,nounits"], timeout=30).stdout
        return [v.strip() for v in out.strip().splitlines()[0].split(",")]

    def read(self) -> ClockSample:
        fields = [f.format(reasons=self.reasons_field) for f in self.FIELDS]
        sm, mem, reasons, temp, power = self._query(fields)
        return ClockSample(time.perf_counter(), float(sm), float(mem), int(reasons, 16),
                           _number(temp), _number(power))

    def facts(self) -> dict[str, Any]:
        names = ["driver_version", "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
                 "clocks.default_applications.graphics"]
        driver, max_sm, max_mem, app, default_app = self._query(names)
        return {"source": self.source, "driver": driver, "max_sm_mhz": _number(max_sm),
                "max_mem_mhz": _number(max_mem), "app_sm_mhz": _number(app),
                "default_app_sm_mhz": _number(default_app), "minor_number": self._minor_number()}

    def _minor_number(self) -> int | None:
        # --query-gpu has no field for it; the full report of this one GPU has "Minor Number : N".
        r = proc.run(["nvidia-smi", "-q", "-i", self.uuid], check=False, timeout=30)
        return minor_number(r.stdout) if r.ok else None


def open_probe(uuid: str) -> tuple[Probe | None, str]:
    """The best available reader for the GPU, or None and why neither NVML nor nvidia-smi works."""
    why = []
    for kind in (NvmlProbe, SmiProbe):
        try:
            return kind(uuid), ""
        except Exception as e:  # a missing reader is reported, never fatal
            why.append(f"{kind.source}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    return None, "; ".join(why)


def clock_lock(facts: dict[str, Any]) -> dict[str, Any]:
    """Whether clocks were pinned. Locking needs root on the host, so it is declared or inferred.

    `nvidia-smi -lgc` cannot be read back through NVML; declare it with KERNELLAB_CLOCKS_LOCKED=1.
    Application clocks away from their default are visible and count as locked.
    """
    declared = os.environ.get("KERNELLAB_CLOCKS_LOCKED")
    if declared is not None:
        return {"locked": declared.strip().lower() in ("1", "true", "yes"), "evidence": "KERNELLAB_CLOCKS_LOCKED"}
    app, default = facts.get("app_sm_mhz"), facts.get("default_app_sm_mhz")
    if app and default and app != default:
        return {"locked": True, "evidence": f"application SM clock {app} MHz, default {default} MHz"}
    return {"locked": False, "evidence": "application clocks at default; none declared (KERNELLAB_CLOCKS_LOCKED)"}


class ClockMonitor:
    """Samples a Probe on a background thread between `start()` and `stop()`."""

    def __init__(self, probe: Probe | None):
        self.probe = probe
        self.samples: list[ClockSample] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClockMonitor:
        if self.probe is not None:
            self._thread = threading.Thread(target=self._loop, name="kernellab-clocks", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        assert self.probe is not None
        interval = getattr(self.probe, "interval_s", 0.1)
        while not self._halt.is_set():
            try:
                self.samples.append(self.probe.read())
            except Exception as e:  # keep timing; report the reader's failure once
                if not self.errors:
                    self.errors.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
            self._halt.wait(interval)

    def window(self, t0: float, t1: float) -> list[ClockSample]:
        return [s for s in list(self.samples) if t0 <= s.t <= t1]


def summarize_window(samples: list[ClockSample], max_sm_mhz: float | None) -> dict[str, Any]:
    """Median and lowest SM clock, the reasons seen, and whether the clock sagged (< 90% of max)."""
    if not samples:
        return {"n": 0}
    sm = [s.sm_mhz for s in samples]
    mask = 0
    for s in samples:
        mask |= s.reasons
    median = statistics.median(sm)
    temps = [s.temp_c for s in samples if s.temp_c is not None]
    powers = [s.power_w for s in samples if s.power_w is not None]
    return {
        "n": len(samples),
        "sm_mhz_median": median,
        "sm_mhz_min": min(sm),
        "mem_mhz_median": statistics.median(s.mem_mhz for s in samples),
        "reasons": reason_names(mask),
        "temp_c_max": max(temps) if temps else None,
        "power_w_max": max(powers) if powers else None,
        "sagged": bool(max_sm_mhz) and median < SAG_FRACTION * float(max_sm_mhz or 0),
    }


def raw(samples: list[ClockSample], t0: float) -> list[dict[str, Any]]:
    """Samples as JSON-ready dicts, times relative to t0 (the run's start)."""
    return [dict(asdict(s), t=round(s.t - t0, 3)) for s in samples]


def minor_number(report: str) -> int | None:
    """The "Minor Number" of `nvidia-smi -q` output for one GPU (its /dev/nvidia<N>), or None."""
    for line in report.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "Minor Number" and value.strip().isdigit():
            return int(value.strip())
    return None


def _nvml_uuid(uuid: str) -> str:
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _maybe(read: Any) -> Any:
    try:
        return read()
    except Exception:  # optional figures some GPUs do not report
        return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"
