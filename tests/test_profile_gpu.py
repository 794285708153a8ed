"""invoke profile and invoke sanitize for real on a GPU: Nsight Compute reports for the ops and their
baselines, the planted bugs (tests/planted/) caught, the shipped ops clean. Run natively and, on the GPU
machine, in the gpuhost container as UID 1000 (.ci/gpu-host.sh). Each test starts the tools as the task
does (`python -m kernellab.nsight.profile` / `kernellab.nsight.sanitize`) and reads what they wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import ROOT, pythonpath
from kernellab.nsight import tools
from kernellab.ops.spec import discover

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
PLANTED = Path(__file__).parent / "planted"


def kernellab(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=900)


@pytest.fixture(autouse=True)
def nsight_tools() -> None:
    for tool in ("ncu", "compute-sanitizer"):
        if tools.find(tool) is None:
            pytest.fail(f"{tool} is not installed here; the GPU machine and its gpuhost image have it")


@pytest.mark.parametrize("op", ["softmax", "matmul", "attention", "softmax_triton"])
def test_profile_reports_the_candidate_and_every_baseline(op: str, tmp_path: Path) -> None:
    result = kernellab("kernellab.nsight.profile", "-k", op, "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    folder = tmp_path / "profile"
    doc = json.loads((folder / "profile.json").read_text())
    spec = next(s for s in discover() if s.name == op)
    assert set(doc["impls"]) == set(spec.candidates) | set(spec.baselines)
    assert doc["ncu"]["clock_control"] == "base" and doc["ncu"]["cache_control"] == "all"
    for impl, info in doc["impls"].items():
        assert (folder / info["report"]).stat().st_size > 0
        assert info["kernels"], f"{impl}: no kernel profiled"
        for k in info["kernels"]:
            assert k["duration_ns"] > 0 and k["registers"] > 0 and k["limiter"].split()[0] in ("memory", "compute", "latency")
            assert 0 < k["sm_pct"] <= 100 and 0 < k["occupancy_achieved_pct"] <= 100
            assert k["instructions"] > 0  # the basic set asks for them (ncu.BASIC_EXTRA)
    assert "| impl | kernel |" in (folder / "summary.md").read_text()
    assert not (tmp_path / "profile.partial").exists()


@pytest.mark.parametrize("impl", ["kernellab", "compile"])
def test_a_backward_pass_profiles_the_backwards_kernels_only(impl: str, tmp_path: Path) -> None:
    """Autograd launches a backward from a thread of its own: the profiled child turns that off, so the kernels
    are inside the NVTX range ncu filters on (none were, before), and the forward that made the graph is not."""
    result = kernellab("kernellab.nsight.profile", "-k", "rmsnorm", "--pass", "backward", "--impl", impl,
                       "--dtype", "float16", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    doc = json.loads((tmp_path / "profile" / "profile.json").read_text())
    names = [k["kernel"] for k in doc["impls"][impl]["kernels"]]
    assert names, "no kernel of the backward was profiled"
    if impl == "kernellab":
        assert any("rmsnorm_backward_kernel" in n for n in names) and not any("rmsnorm_kernel" in n for n in names), names
    assert doc["pass"] == "backward"


def test_clocks_profiles_each_kernel_again_at_the_gpus_own_clocks(tmp_path: Path) -> None:
    """--clocks: the same kernels a second time, not locked to base; where the GPU's own clock is the higher one
    (a boost clock), each kernel gets the share of that change its time followed."""
    result = kernellab("kernellab.nsight.profile", "-k", "softmax", "--pass", "backward", "--impl", "kernellab",
                       "--dtype", "float16", "--shape", "4096x4096", "--clocks", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    folder = tmp_path / "profile"
    doc = json.loads((folder / "profile.json").read_text())
    assert doc["ncu"]["boost_run"] is True
    (kernel,) = doc["impls"]["kernellab"]["kernels"]
    assert kernel["sm_hz"] > 0 and kernel["boost_sm_hz"] > 0 and kernel["boost_duration_ns"] > 0
    if kernel["boost_sm_hz"] >= 1.05 * kernel["sm_hz"]:
        assert -0.5 < kernel["clock_share"] < 1.5, kernel
    assert list(folder.glob("*-boost.ncu-rep")) and list(folder.glob("*-boost.csv"))
    assert "| follows SM clock |" in (folder / "summary.md").read_text()


def test_a_kernel_filter_that_matches_nothing_is_one_sentence_and_leaves_no_report(tmp_path: Path) -> None:
    result = kernellab("kernellab.nsight.profile", "-k", "softmax", "--impl", "kernellab", "--kernel", "no_such_kernel",
                       "--out", str(tmp_path))
    assert result.returncode != 0
    assert result.stderr.strip().startswith("kernellab: --kernel 'no_such_kernel' matches no kernel")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "profile").exists() and not (tmp_path / "profile.partial").exists()


def test_trace_writes_a_chrome_trace_per_implementation(tmp_path: Path) -> None:
    result = kernellab("kernellab.nsight.profile", "-k", "vector_add", "--trace", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    doc = json.loads((tmp_path / "profile" / "profile.json").read_text())
    for info in doc["impls"].values():
        trace = json.loads((tmp_path / "profile" / info["trace"]).read_text())
        assert any(e.get("cat") == "kernel" for e in trace["traceEvents"]), "no GPU kernel in the trace"


def test_sanitize_catches_the_out_of_bounds_write() -> None:
    result = kernellab("kernellab.nsight.sanitize", "-k", "oob_write", "--kernels", str(PLANTED), "--tool", "memcheck")
    assert result.returncode == 1, result.stdout
    assert "Invalid __global__ write of size 4 bytes" in result.stdout
    assert "oob_write_kernel" in result.stdout and "oob_write.cu:8" in result.stdout
    assert "case kernellab n=1001 float32 seed=0" in result.stdout


def test_sanitize_catches_the_shared_memory_race() -> None:
    result = kernellab("kernellab.nsight.sanitize", "-k", "shared_race", "--kernels", str(PLANTED), "--tool", "racecheck")
    assert result.returncode == 1, result.stdout
    assert "Race reported between Write access" in result.stdout
    assert "shared_race.cu:10 and shared_race.cu:12" in result.stdout


@pytest.mark.parametrize("op", [s.name for s in discover() if s.needs_gpu])
def test_every_shipped_op_is_clean_under_every_tool(op: str) -> None:
    if os.environ.get("KERNELLAB_SANITIZE_OPS") and op not in os.environ["KERNELLAB_SANITIZE_OPS"].split(","):
        pytest.skip("KERNELLAB_SANITIZE_OPS names other ops")
    result = kernellab("kernellab.nsight.sanitize", "-k", op, "--tool", "all")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for tool in ("memcheck", "racecheck", "initcheck", "synccheck"):
        assert f"{tool}: clean" in result.stdout


def test_a_backward_timeline_holds_the_backwards_kernels_and_not_the_forwards(tmp_path: Path) -> None:
    """--pass backward: each call is torch.autograd.grad of a forward run before it, outside the call's range, so the
    candidate's calls hold its backward kernels and no forward kernel; every implementation is captured."""
    if tools.find("nsys") is None:
        pytest.fail("nsys is not installed here; the GPU machine has it inside Nsight Compute's folder")
    result = kernellab("kernellab.nsight.op_timeline", "-k", "layernorm", "--pass", "backward", "--calls", "3",
                       "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    folder = tmp_path / "timeline"
    doc = json.loads((folder / "timeline.json").read_text())
    assert doc["which"] == "backward" and set(doc["impls"]) == {"kernellab", "eager", "compile"}
    names = [r["kernel"] for r in doc["impls"]["kernellab"]["kernels"]]
    assert any("layernorm_backward_kernel" in n for n in names), names
    assert not any("layernorm_kernel" in n for n in names), names  # the forward ran outside the calls
    assert all(s["calls"] == 3 and s["kernels_per_call"] >= 1 for s in doc["impls"].values())
    assert ", backward) on " in (folder / "summary.md").read_text()
    assert doc["report"].endswith("-timeline-backward.nsys-rep")


@pytest.mark.parametrize("op", ["softmax", "softmax_triton"])
def test_a_timeline_records_every_call_of_every_implementation_with_its_kernels(op: str, tmp_path: Path) -> None:
    """nsys on the GPU: every implementation's calls captured (warm-up excluded), kernels attributed, a picture."""
    if tools.find("nsys") is None:
        pytest.fail("nsys is not installed here; the GPU machine has it inside Nsight Compute's folder")
    result = kernellab("kernellab.nsight.op_timeline", "-k", op, "--calls", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    folder = tmp_path / "timeline"
    doc = json.loads((folder / "timeline.json").read_text())
    spec = next(s for s in discover() if s.name == op)
    assert set(doc["impls"]) == set(spec.candidates) | set(spec.baselines)
    for impl, s in doc["impls"].items():
        assert s["calls"] == 4 and s["kernels_per_call"] >= 1, impl
        assert s["gpu_us_per_call"] > 0 and s["call_us"] >= s["gpu_us_per_call"] * 0.5, impl
        assert sum(r["launches"] for r in s["kernels"]) == s["kernels_per_call"] * 4
    assert (folder / doc["report"]).stat().st_size > 0
    assert (folder / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "| impl | kernels per call |" in (folder / "summary.md").read_text()
    assert not (tmp_path / "timeline.partial").exists() and not list(folder.glob("*.sqlite"))
