"""Peaks measured on this machine, and where each result sits under them.

Calibration times a large device-to-device copy (bytes read + written) and a cuBLAS GEMM per
dtype with the same engine as the benchmarks, once per GPU UUID and driver; the result is cached
under $KERNELLAB_CACHE/bench/. Datasheet peaks (datasheet.json) are shown beside them.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import timing

#: A result above this share of a measured peak, or a speedup above SUSPECT_SPEEDUP, is suspect:
#: usually a wrong byte/FLOP count, a cache left warm or work skipped.
SUSPECT_PEAK = 1.0
SUSPECT_SPEEDUP = 10.0
#: The best of these cubes: a large GEMM can run under a power cap that a smaller one escapes.
GEMM_SIZES = (4096, 8192)
COPY_BYTES = 1 << 30
CALIBRATION = replace(timing.DEFAULT, min_time_s=0.2, timeout_s=3.0)
DTYPES = ("float32", "float16", "bfloat16")


def cache_file(cache_dir: Path, uuid: str, driver: str | None) -> Path:
    key = re.sub(r"[^A-Za-z0-9._-]", "_", f"{uuid}-{driver or 'unknown-driver'}")
    return cache_dir / "bench" / f"calibration-{key}.json"


def calibrate(cache_dir: Path, uuid: str, driver: str | None, *, refresh: bool = False) -> dict[str, Any]:
    """Measured peaks for the current CUDA device, from the cache when this GPU and driver have them."""
    path = cache_file(cache_dir, uuid, driver)
    if path.exists() and not refresh:
        try:
            peaks = json.loads(path.read_text())
            return dict(peaks, cached=True, cache_file=str(path))
        except (OSError, ValueError):
            pass  # a damaged cache is measured again
    peaks = _measure()
    peaks.update(uuid=uuid, driver=driver)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(peaks, indent=2))
    tmp.replace(path)
    return dict(peaks, cached=False, cache_file=str(path))


def _measure() -> dict[str, Any]:
    import torch

    free, _total = torch.cuda.mem_get_info()
    # Keep to an eighth of free memory so calibration fits small laptop GPUs too.
    nbytes = min(COPY_BYTES, free // 8)
    return {
        "copy_gbps": _copy_gbps(torch, nbytes),
        "copy_bytes": nbytes,
        "gemm_tflops": {name: _gemm_tflops(torch, getattr(torch, name)) for name in DTYPES},
        "gemm_sizes": list(GEMM_SIZES),
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }


def _copy_gbps(torch: Any, nbytes: int) -> float:
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    m = timing.do_bench(lambda: dst.copy_(src), CALIBRATION)
    return 2 * nbytes / (m.median_ms * 1e-3) / 1e9  # bytes read + bytes written


def _gemm_tflops(torch: Any, dtype: Any) -> float:
    best = 0.0
    for n in GEMM_SIZES:
        a = torch.randn(n, n, device="cuda", dtype=dtype)  # random data: zeros run faster
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        m = timing.do_bench(functools.partial(torch.matmul, a, b), CALIBRATION)
        best = max(best, 2 * n**3 / (m.median_ms * 1e-3) / 1e12)
    return best


def datasheet(gpu_name: str) -> dict[str, Any] | None:
    """The vendor's peaks for this GPU model, or None for a model not in datasheet.json."""
    table = json.loads((Path(__file__).parent / "datasheet.json").read_text())
    for entry in table["gpus"]:
        if gpu_name in entry["names"]:
            return {k: v for k, v in entry.items() if k != "names"}
    return None


def metrics(nbytes: int, flops: int, median_ms: float, dtype: str, peaks: dict[str, Any] | None) -> dict[str, Any]:
    """GB/s, TFLOP/s and the share of the binding measured peak (memory or compute)."""
    seconds = median_ms * 1e-3
    out: dict[str, Any] = {
        "gbps": nbytes / seconds / 1e9 if nbytes else None,
        "tflops": flops / seconds / 1e12 if flops else None,
        "pct_mem": None, "pct_compute": None, "pct_peak": None, "bound": None,
    }
    if not peaks:
        return out
    if out["gbps"] is not None and peaks.get("copy_gbps"):
        out["pct_mem"] = 100.0 * out["gbps"] / peaks["copy_gbps"]
    gemm = peaks.get("gemm_tflops", {}).get(dtype)
    if out["tflops"] is not None and gemm:
        out["pct_compute"] = 100.0 * out["tflops"] / gemm
    shares = {k: v for k, v in (("memory", out["pct_mem"]), ("compute", out["pct_compute"])) if v is not None}
    if shares:
        out["bound"] = max(shares, key=lambda k: shares[k])
        out["pct_peak"] = shares[out["bound"]]
    return out


def suspicions(pct_peak: float | None, speedups: dict[str, float]) -> list[str]:
    """Why a result is too good to trust as is (empty when nothing is suspect)."""
    why = []
    if pct_peak is not None and pct_peak > 100.0 * SUSPECT_PEAK:
        why.append(f"{pct_peak:.0f}% of measured peak")
    for name, value in speedups.items():
        if value > SUSPECT_SPEEDUP:
            why.append(f"{value:.1f}x over {name}")
    return why
