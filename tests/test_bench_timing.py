"""The adaptive timing loop, exercised on the CPU timer (the CUDA path is in test_bench_gpu.py)."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from kernellab.bench import timing

FAST = replace(timing.DEFAULT, min_samples=10, min_time_s=0.02, timeout_s=2.0, round_s=0.01)


def _sleeper(seconds: float, calls: list[str] | None = None, name: str = ""):
    def fn() -> None:
        if calls is not None:
            calls.append(name)
        time.sleep(seconds)
    return fn


def test_stops_once_enough_samples_and_time_and_labels_the_timer() -> None:
    m = timing.do_bench(_sleeper(0.002), FAST, device="cpu")
    assert m.timer == "cpu-perf-counter"
    assert m.stop_reason in ("converged", "plateau")
    assert len(m.samples_ms) >= FAST.min_samples
    assert sum(m.samples_ms) / 1e3 >= FAST.min_time_s
    assert 2.0 <= m.median_ms < 10.0


def test_first_call_is_not_a_sample() -> None:
    state = {"first": True}

    def slow_first() -> None:
        time.sleep(0.08 if state["first"] else 0.001)
        state["first"] = False

    m = timing.do_bench(slow_first, FAST, device="cpu")
    assert m.first_call_ms >= 80
    assert max(m.samples_ms) < 40


def test_functions_are_interleaved_in_alternating_order() -> None:
    calls: list[str] = []
    timing.measure({"a": _sleeper(0.0005, calls, "a"), "b": _sleeper(0.0005, calls, "b")}, FAST, device="cpu")
    assert calls[:2] == ["a", "b"]  # the untimed first calls
    assert calls[2:10] == ["a", "b", "b", "a", "a", "b", "b", "a"]  # A B, B A: drift hits both alike


def test_each_function_stops_on_its_own_and_keeps_its_samples() -> None:
    out = timing.measure({"fast": _sleeper(0.0005), "slow": _sleeper(0.004)}, FAST, device="cpu")
    assert set(out) == {"fast", "slow"}
    assert out["slow"].median_ms > 3 * out["fast"].median_ms
    assert all(len(m.samples_ms) >= FAST.min_samples for m in out.values())


def test_noisy_function_stops_at_timeout() -> None:
    state = {"i": 0}

    def erratic() -> None:
        # Alternating 1 ms / 6 ms: relative stdev stays near 70% and keeps moving.
        state["i"] += 1
        time.sleep(0.006 if state["i"] % 2 else 0.001)

    s = replace(FAST, min_time_s=10.0, timeout_s=0.3)
    t0 = time.perf_counter()
    m = timing.do_bench(erratic, s, device="cpu")
    assert m.stop_reason == "timeout"
    assert time.perf_counter() - t0 < 3.0


def test_quick_settings_are_shorter_than_the_defaults() -> None:
    assert timing.QUICK.min_time_s < timing.DEFAULT.min_time_s
    assert timing.QUICK.timeout_s < timing.DEFAULT.timeout_s
    assert timing.DEFAULT.min_samples == 10 and timing.DEFAULT.max_rel_stdev == pytest.approx(0.01)
    assert timing.DEFAULT.min_time_s == pytest.approx(0.5) and timing.DEFAULT.flush_factor == 2.0
