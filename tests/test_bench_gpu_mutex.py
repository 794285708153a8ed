"""Two benchmark runs on one GPU: the second waits for the GPU's mutex, says so, then goes on."""
from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

from kernellab.bench import gpu_mutex

SRC = Path(__file__).resolve().parents[1] / "src"
HOLDER = """
import sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from kernellab.bench import gpu_mutex
with gpu_mutex.exclusive_gpu(Path({cache!r}), "GPU-test-uuid"):
    print("held", flush=True)
    time.sleep(1.5)
"""


def test_second_run_waits_and_names_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(src=str(SRC), cache=str(tmp_path))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        out = io.StringIO()
        t0 = time.perf_counter()
        with gpu_mutex.exclusive_gpu(tmp_path, "GPU-test-uuid", label="H100 GPU-test-uuid", out=out) as path:
            waited = time.perf_counter() - t0
            assert f"pid {holder.pid}" not in path.read_text()  # the mutex file now names us
        # The holder keeps the GPU 1.5 s after saying "held": getting it much sooner means no wait.
        assert waited > 1.0, "the second run did not wait for the first"
        message = out.getvalue()
        assert "waiting for another benchmark, profile or sanitize run on GPU H100 GPU-test-uuid" in message
        assert f"pid {holder.pid}" in message
    finally:
        holder.kill()
        holder.wait()


def test_uncontended_mutex_is_silent_and_reusable(tmp_path: Path) -> None:
    out = io.StringIO()
    for _ in range(2):
        with gpu_mutex.exclusive_gpu(tmp_path, "GPU-a/b", out=out) as path:
            assert path == gpu_mutex.mutex_path(tmp_path, "GPU-a/b")
            assert path.parent == tmp_path / "locks" and "/" not in path.name[4:]
    assert out.getvalue() == ""


def test_different_gpus_do_not_wait_for_each_other(tmp_path: Path) -> None:
    out = io.StringIO()
    with gpu_mutex.exclusive_gpu(tmp_path, "GPU-one", out=out), gpu_mutex.exclusive_gpu(tmp_path, "GPU-two", out=out):
        pass
    assert out.getvalue() == ""
