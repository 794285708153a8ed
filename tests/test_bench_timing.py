"""The adaptive timing loop, exercised on the CPU timer (the CUDA path is in test_bench_gpu.py).

Every test runs the loop on a fake clock (bench_fakes.FakeClock): a function "takes" exactly the
milliseconds the test scripts, so stopping, sample counts and medians never depend on this
machine's speed or load.
"""
from __future__ import annotations

from dataclasses import replace
from itertools import count

import pytest

import bench_fakes
from kernellab.bench import timing

FAST = replace(timing.DEFAULT, min_samples=10, min_time_s=0.02, timeout_s=2.0, round_s=0.01)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> bench_fakes.FakeClock:
    return bench_fakes.use_fake_clock(monkeypatch)


def test_stops_once_enough_samples_and_time_and_labels_the_timer(clock: bench_fakes.FakeClock) -> None:
    # 2 ms with a 0.2% spread: converged (under 1%) as soon as the minimum time is reached.
    m = timing.do_bench(bench_fakes.takes(clock, bench_fakes.noisy(2.0, 0.002)), FAST, device="cpu")
    assert m.timer == "cpu-perf-counter"
    assert m.stop_reason == "converged"
    assert len(m.samples_ms) >= FAST.min_samples
    assert sum(m.samples_ms) / 1e3 >= FAST.min_time_s
    assert m.median_ms == pytest.approx(2.0, rel=0.01)


def test_first_call_is_not_a_sample(clock: bench_fakes.FakeClock) -> None:
    calls = count()
    m = timing.do_bench(bench_fakes.takes(clock, lambda: 80.0 if next(calls) == 0 else 1.0), FAST, device="cpu")
    assert m.first_call_ms == pytest.approx(80.0)
    assert max(m.samples_ms) < 40
    assert m.median_ms == pytest.approx(1.0)


def test_functions_are_interleaved_in_alternating_order(clock: bench_fakes.FakeClock) -> None:
    calls: list[str] = []
    timing.measure({"a": bench_fakes.takes(clock, lambda: 0.5, calls=calls, name="a"),
                    "b": bench_fakes.takes(clock, lambda: 0.5, calls=calls, name="b")}, FAST, device="cpu")
    assert calls[:2] == ["a", "b"]  # the untimed first calls
    assert calls[2:10] == ["a", "b", "b", "a", "a", "b", "b", "a"]  # A B, B A: drift hits both alike


def test_each_function_stops_on_its_own_and_keeps_its_samples(clock: bench_fakes.FakeClock) -> None:
    out = timing.measure({"fast": bench_fakes.takes(clock, bench_fakes.noisy(0.5, 0.002, seed=1)),
                          "slow": bench_fakes.takes(clock, bench_fakes.noisy(4.0, 0.002, seed=2))}, FAST, device="cpu")
    assert set(out) == {"fast", "slow"}
    assert out["slow"].median_ms > 3 * out["fast"].median_ms
    assert all(len(m.samples_ms) >= FAST.min_samples for m in out.values())
    # The slow one reaches the minimum time first and stops; the fast one goes on sampling alone.
    assert len(out["fast"].samples_ms) > len(out["slow"].samples_ms)


def test_noisy_function_stops_at_timeout(clock: bench_fakes.FakeClock) -> None:
    # Alternating 1 ms / 6 ms: relative stdev stays near 70% and keeps moving.
    calls = count()
    s = replace(FAST, min_time_s=10.0, timeout_s=0.3)
    t0 = clock.perf_counter()
    m = timing.do_bench(bench_fakes.takes(clock, lambda: 6.0 if next(calls) % 2 else 1.0), s, device="cpu")
    assert m.stop_reason == "timeout"
    assert s.timeout_s <= clock.perf_counter() - t0 < 3.0


def test_quick_settings_are_shorter_than_the_defaults() -> None:
    assert timing.QUICK.min_time_s < timing.DEFAULT.min_time_s
    assert timing.QUICK.timeout_s < timing.DEFAULT.timeout_s
    assert timing.DEFAULT.min_samples == 10 and timing.DEFAULT.max_rel_stdev == pytest.approx(0.01)
    assert timing.DEFAULT.min_time_s == pytest.approx(0.5) and timing.DEFAULT.flush_factor == 2.0


def test_a_tiny_case_is_measured_again_each_time_afresh(clock: bench_fakes.FakeClock) -> None:
    # 4 us and 3 us: under graph_below_ms, so tiny_repeats measurements in all; the later ones of min_time / repeats.
    calls: list[str] = []
    fns = {"a": bench_fakes.takes(clock, bench_fakes.noisy(0.004, 0.002, seed=1), calls=calls, name="a"),
           "b": bench_fakes.takes(clock, bench_fakes.noisy(0.003, 0.002, seed=2), calls=calls, name="b")}
    settings = replace(FAST, tiny_repeats=4)
    out = timing.measure_repeated(fns, settings, device="cpu")
    assert len(out) == 4 and all(set(m) == {"a", "b"} for m in out)
    first, *later = out
    assert sum(first["a"].samples_ms) / 1e3 >= settings.min_time_s
    for m in later:
        assert settings.min_time_s / 4 <= sum(m["a"].samples_ms) / 1e3 < settings.min_time_s
        assert m["a"].median_ms == pytest.approx(0.004, rel=0.01) and m["b"].median_ms == pytest.approx(0.003, rel=0.01)
    # Each measurement is its own: an untimed first call of each function, then the interleaved samples.
    assert calls.count("a") == sum(len(m["a"].samples_ms) for m in out) + 4


@pytest.mark.parametrize("a_ms, b_ms, repeats, expected", [
    (0.02, 0.05, 5, 1),     # neither under 10 us
    (0.02, 0.004, 5, 5),    # one tiny function makes a tiny case: its ratio to the other moves as it does
    (0.004, 0.003, 1, 1),   # tiny_repeats = 1: measured once
    (0.004, 0.003, 3, 3),
])
def test_only_tiny_cases_are_repeated(clock: bench_fakes.FakeClock, a_ms: float, b_ms: float, repeats: int,
                                      expected: int) -> None:
    fns = {"a": bench_fakes.takes(clock, bench_fakes.noisy(a_ms, 0.002)),
           "b": bench_fakes.takes(clock, bench_fakes.noisy(b_ms, 0.002, seed=3))}
    out = timing.measure_repeated(fns, replace(FAST, tiny_repeats=repeats), device="cpu")
    assert len(out) == expected
    assert timing.QUICK.tiny_repeats == 1 and timing.DEFAULT.tiny_repeats == 5


def test_a_failing_later_measurement_keeps_the_ones_made(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count()
    made = timing.Measurement("a", "cpu-perf-counter", 0.0, samples_ms=[0.003] * 10)

    def measure(fns: dict, settings: timing.Settings, **kwargs: object) -> dict:
        if next(calls) == 2:
            raise RuntimeError("CUDA out of memory")
        return {"a": made}

    monkeypatch.setattr(timing, "measure", measure)
    out = timing.measure_repeated({"a": lambda: None}, replace(FAST, tiny_repeats=5), device="cpu")
    assert out == [{"a": made}, {"a": made}]  # the first two stand; the third failed and no more were tried
    assert next(calls) == 3
