"""What a run records about where it ran: image facts, lock hash, git state, clocks, peaks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernellab import provenance
from kernellab.bench import clocks, environment, roofline


def test_outside_an_image_it_is_native(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELLAB_IMAGE_ID", raising=False)
    assert environment.image(tmp_path) == "native"


def test_inside_an_image_the_lock_hash_equals_the_image_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locks = pytest.importorskip("kernellab.image.locks", reason="kernellab.image.locks needs the host dependencies")
    lock = {"base": {"digest": "sha256:00"}, "pip": ["torch==2.11.0"]}
    (tmp_path / "lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True))
    (tmp_path / "spec.json").write_text('{"target": "cu130-pip", "arch_list": "9.0"}')
    monkeypatch.setenv("KERNELLAB_IMAGE_ID", "sha256:abc")
    facts = environment.image(tmp_path)
    assert isinstance(facts, dict)
    assert facts["id"] == "sha256:abc" and facts["spec"]["target"] == "cu130-pip"
    assert facts["lock_sha256"] == locks.lock_digest(lock)


def test_git_state_from_files_when_git_is_missing(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("# pack-refs\n" + "a" * 40 + " refs/heads/main\n")
    assert provenance.commit_from_files(git) == "a" * 40
    (git / "refs" / "heads" / "main").write_text("b" * 40 + "\n")
    assert provenance.commit_from_files(git) == "b" * 40
    assert provenance.commit_from_files(tmp_path / "nowhere") is None


def test_clock_window_flags_a_sag_and_names_reasons() -> None:
    samples = [clocks.ClockSample(t=float(i), sm_mhz=1500.0, mem_mhz=2619.0, reasons=0x4, power_w=690.0)
               for i in range(5)]
    summary = clocks.summarize_window(samples, max_sm_mhz=1980)
    assert summary["sagged"] is True and summary["reasons"] == ["sw_power_cap"]
    assert summary["sm_mhz_median"] == 1500.0 and summary["power_w_max"] == 690.0
    full = [clocks.ClockSample(t=0.0, sm_mhz=1980.0, mem_mhz=2619.0, reasons=0)]
    assert clocks.summarize_window(full, 1980)["sagged"] is False
    assert clocks.summarize_window([], 1980) == {"n": 0}


def test_clock_lock_is_declared_or_inferred(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELLAB_CLOCKS_LOCKED", raising=False)
    assert clocks.clock_lock({"app_sm_mhz": 1980, "default_app_sm_mhz": 1980})["locked"] is False
    assert clocks.clock_lock({"app_sm_mhz": 1500, "default_app_sm_mhz": 1980})["locked"] is True
    monkeypatch.setenv("KERNELLAB_CLOCKS_LOCKED", "1")
    assert clocks.clock_lock({})["locked"] is True


def test_no_gpu_reader_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    probe, why = clocks.open_probe("GPU-0000")
    assert probe is None and "nvml" in why and "nvidia-smi" in why


def test_roofline_metrics_pick_the_binding_peak() -> None:
    peaks = {"copy_gbps": 3000.0, "gemm_tflops": {"float16": 700.0}}
    # 3 GB in 1 ms = 3000 GB/s: all of the copy bandwidth; 1 GFLOP in 1 ms = 1 TFLOP/s.
    m = roofline.metrics(3_000_000_000, 1_000_000_000, 1.0, "float16", peaks)
    assert m["gbps"] == pytest.approx(3000.0) and m["tflops"] == pytest.approx(1.0)
    assert m["bound"] == "memory" and m["pct_peak"] == pytest.approx(100.0)
    g = roofline.metrics(1_000_000, 700_000_000_000, 1.0, "float16", peaks)
    assert g["bound"] == "compute" and g["pct_peak"] == pytest.approx(100.0)
    assert roofline.metrics(1, 1, 1.0, "float32", None)["pct_peak"] is None


def test_suspect_results_are_named() -> None:
    assert roofline.suspicions(99.0, {"eager": 9.9}) == []
    assert roofline.suspicions(130.0, {"eager": 12.0}) == ["130% of measured peak", "12.0x over eager"]


def test_calibration_is_cached_per_gpu_and_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(roofline, "_measure", lambda: calls.append(1) or {"copy_gbps": 1.0, "gemm_tflops": {}})
    first = roofline.calibrate(tmp_path, "GPU-1", "580.1")
    again = roofline.calibrate(tmp_path, "GPU-1", "580.1")
    other = roofline.calibrate(tmp_path, "GPU-1", "590.2")
    assert (first["cached"], again["cached"], other["cached"]) == (False, True, False)
    assert len(calls) == 2 and again["uuid"] == "GPU-1" and again["driver"] == "580.1"


def test_datasheet_knows_the_h100_and_not_a_made_up_gpu() -> None:
    sheet = roofline.datasheet("NVIDIA H100 80GB HBM3")
    assert sheet is not None and sheet["memory_gbps"] == 3350
    assert roofline.datasheet("NVIDIA GeForce Imaginary 9999") is None


def test_datasheet_entries_have_the_documented_fields_and_one_entry_per_name() -> None:
    table = json.loads((Path(roofline.__file__).parent / "datasheet.json").read_text())
    fields = set(table["_fields"])
    seen: set[str] = set()
    for entry in table["gpus"]:
        assert set(entry) == fields, entry["names"]
        assert entry["names"] and not seen & set(entry["names"]), entry["names"]
        seen |= set(entry["names"])
        assert all(entry[k] > 0 for k in ("memory_gbps", "fp16_tflops", "bf16_tflops", "fp32_tflops"))


def test_peaks_live_only_in_the_datasheet_not_in_the_matrix() -> None:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads TOML without tomli")
    matrix = tomllib.loads((Path(roofline.__file__).parents[3] / "docker" / "matrix.toml").read_text())
    for key, gpu in matrix["gpu"].items():
        peaks = [k for k in gpu if any(w in k.lower() for w in ("gbps", "tflops", "bandwidth", "peak"))]
        assert not peaks, f"[gpu.{key}] {peaks}: peak figures belong in src/kernellab/bench/datasheet.json"
