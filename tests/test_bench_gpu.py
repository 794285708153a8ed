"""The CUDA side of the bench engine: events, L2 flush, graphs, NVML, calibration, a GPU run."""
from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch, or use a kernellab image)")

import bench_fakes  # noqa: E402
from kernellab.bench import clocks, roofline, runner, timing  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason=f"needs an NVIDIA GPU visible to PyTorch; torch {torch.__version__} sees none "
                              "(run on a GPU machine or in a GPU image with `invoke test`)"),
]
SHORT = replace(timing.DEFAULT, min_time_s=0.1, timeout_s=3.0)


def _uuid() -> str:
    return str(torch.cuda.get_device_properties(0).uuid)


def test_cuda_events_time_a_bandwidth_bound_kernel_plausibly() -> None:
    x = torch.randn(1 << 24, device="cuda")
    y = torch.randn(1 << 24, device="cuda")
    m = timing.do_bench(lambda: x + y, SHORT)
    assert m.timer == "cuda-events" and m.stop_reason in ("converged", "plateau")
    assert m.summary.n >= 10 and sum(m.samples_ms) >= 100
    gbps = 3 * x.numel() * 4 / (m.median_ms * 1e-3) / 1e9
    assert 50 < gbps < 10_000, f"{gbps:.0f} GB/s is not a plausible cold vector add"


def test_the_flush_buffer_is_twice_l2() -> None:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert timing._CudaTimer(timing.DEFAULT).cache.numel() == 2 * l2


def test_tiny_kernels_also_get_a_cold_cuda_graph_figure() -> None:
    x = torch.randn(1024, device="cuda")
    m = timing.do_bench(lambda: x * 2, SHORT)
    assert m.median_ms < SHORT.graph_below_ms
    assert m.graph_ms is not None, m.graph_note
    assert 0 < m.graph_ms < m.median_ms * 1.5 and "flush time subtracted" in m.graph_note


def test_median_agrees_with_triton_do_bench() -> None:
    testing = pytest.importorskip("triton.testing", reason="triton is not installed (it comes with CUDA torch)")
    x = torch.randn(1 << 26, device="cuda")
    ours = timing.do_bench(lambda: x * 2, SHORT).median_ms
    theirs = testing.do_bench(lambda: x * 2, return_mode="median")
    assert ours == pytest.approx(theirs, rel=0.03)


def test_nvml_or_nvidia_smi_reads_clocks() -> None:
    probe, why = clocks.open_probe(_uuid())
    if probe is None:
        pytest.skip(f"neither NVML nor nvidia-smi can read this GPU: {why}")
    sample, facts = probe.read(), probe.facts()
    assert sample.sm_mhz > 0 and sample.mem_mhz > 0
    assert facts["driver"] and facts["max_sm_mhz"] >= sample.sm_mhz * 0.5


def test_calibration_measures_plausible_peaks(tmp_path: Path) -> None:
    peaks = roofline.calibrate(tmp_path, _uuid(), "test-driver")
    assert 100 < peaks["copy_gbps"] < 20_000
    assert peaks["gemm_tflops"]["float16"] > peaks["gemm_tflops"]["float32"] > 0.5


def test_a_gpu_run_over_fake_ops_fills_every_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    specs = [bench_fakes.FakeSpec("vadd", kind="cuda", bench_shapes=[{"n": 1 << 22}])]
    doc, folder = runner.run(runner.Options(quick=True, out=tmp_path / "run"),
                             catalog=bench_fakes.catalog(specs, {"kernellab": lambda x, y: x + y}),
                             log=io.StringIO())
    row = next(r for r in doc["rows"] if r["impl"] == "kernellab")
    assert row["status"] == "ok" and row["timer"] == "cuda-events"
    assert row["pct_peak"] is not None and row["bound"] == "memory"
    gpu = doc["environment"]["gpu"]
    assert gpu["uuid"] and gpu["sm_count"] > 0 and gpu["l2_bytes"] > 0 and gpu["compute_capability"]
    assert doc["peaks"]["copy_gbps"] > 0 and (folder / "roofline.png").exists()


def test_host_launch_overhead_stays_out_of_the_gpu_time() -> None:
    import time

    x = torch.randn(1 << 22, device="cuda")
    fast = timing.do_bench(lambda: x * 2, SHORT)

    def slow_launch() -> object:
        time.sleep(0.0003)  # 300 us of Python before the kernel is queued
        return x * 2

    slow = timing.do_bench(slow_launch, SHORT)
    assert slow.host_ms is not None and slow.host_ms >= 0.3
    assert slow.median_ms == pytest.approx(fast.median_ms, rel=0.15, abs=0.003)
