"""Pure statistics of the bench engine: summaries, stopping signals, intervals, verdicts."""
from __future__ import annotations

import math
import random
import statistics
from typing import Any

import numpy as np
import pytest

from kernellab.bench import stats


def test_summary_matches_numpy_on_known_samples() -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 100.0]
    s = stats.summarize(xs)
    assert s.n == 6 and s.min == 1.0 and s.max == 100.0
    assert s.median == pytest.approx(np.median(xs))
    assert s.q1 == pytest.approx(np.quantile(xs, 0.25))
    assert s.q3 == pytest.approx(np.quantile(xs, 0.75))
    assert s.iqr == pytest.approx(s.q3 - s.q1)
    assert s.mean == pytest.approx(np.mean(xs))
    assert s.stdev == pytest.approx(np.std(xs, ddof=1))
    assert s.rel_stdev == pytest.approx(s.stdev / s.mean)


def test_summary_of_one_sample_has_zero_spread_and_none_is_an_error() -> None:
    s = stats.summarize([2.5])
    assert (s.median, s.iqr, s.stdev) == (2.5, 0.0, 0.0)
    with pytest.raises(ValueError):
        stats.summarize([])


def test_running_noise_equals_batch_stdev_over_mean() -> None:
    rng = random.Random(1)
    xs = [rng.gauss(10.0, 0.3) for _ in range(500)]
    run = stats.Running()
    assert math.isinf(run.rel_stdev)
    for x in xs:
        run.add(x)
    assert run.n == 500 and run.total == pytest.approx(sum(xs))
    assert run.rel_stdev == pytest.approx(statistics.stdev(xs) / statistics.fmean(xs), rel=1e-9)


def test_robust_noise_ignores_one_outlier_that_stdev_does_not() -> None:
    xs = [1.0 + 0.001 * (i % 10) for i in range(100)] + [50.0]
    assert stats.robust_noise(xs) < 0.01
    assert stats.summarize(xs).rel_stdev > 1.0


@pytest.mark.parametrize("history, expected", [
    ([0.05, 0.03, 0.021, 0.0205, 0.0202, 0.0201], True),   # settled near 2%
    ([0.05, 0.04, 0.03, 0.02], False),                     # still falling
    ([0.02, 0.02, 0.02], False),                           # too few checks
    ([math.inf, 0.02, 0.02, 0.02], False),                 # undefined noise in the window
])
def test_plateau(history: list[float], expected: bool) -> None:
    assert stats.plateaued(history) is expected


def test_ratio_of_medians_interval_covers_the_truth_and_is_reproducible() -> None:
    rng = random.Random(7)
    slow = [rng.gauss(2.0, 0.04) for _ in range(200)]
    fast = [rng.gauss(1.0, 0.02) for _ in range(200)]
    r = stats.ratio_of_medians(slow, fast)
    assert r.lo < 2.0 < r.hi
    assert r.lo < r.value < r.hi
    assert r.hi - r.lo < 0.05
    assert stats.ratio_of_medians(slow, fast) == r


def test_ratio_interval_narrows_with_more_samples() -> None:
    rng = random.Random(3)
    few = stats.ratio_of_medians([rng.gauss(1, 0.05) for _ in range(20)], [rng.gauss(1, 0.05) for _ in range(20)])
    many = stats.ratio_of_medians([rng.gauss(1, 0.05) for _ in range(2000)], [rng.gauss(1, 0.05) for _ in range(2000)])
    assert (many.hi - many.lo) < (few.hi - few.lo) / 3


def _samples(center: float, spread: float, n: int = 200, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(center, spread * center) for _ in range(n)]


def test_a_clear_slowdown_is_a_regression() -> None:
    v = stats.compare_samples(_samples(1.0, 0.005), _samples(1.10, 0.005, seed=1))
    assert v.verdict == "slower"
    assert v.change == pytest.approx(0.10, abs=0.01)
    assert v.threshold == pytest.approx(stats.MIN_EFFECT)


def test_a_small_but_certain_slowdown_is_not_a_regression() -> None:
    # 2% is resolved by the interval but stays under the 3% floor.
    v = stats.compare_samples(_samples(1.0, 0.002, 2000), _samples(1.02, 0.002, 2000, seed=1))
    assert v.ratio.lo > 1.0
    assert v.verdict == "same"


def test_noise_raises_the_bar() -> None:
    # 6% slower, but either run alone spreads ~5%: the threshold is 2x noise, ~10%.
    v = stats.compare_samples(_samples(1.0, 0.05, 2000), _samples(1.06, 0.05, 2000, seed=1))
    assert v.threshold > 0.08
    assert v.verdict == "same"


def test_a_clear_speedup_is_faster_and_identical_runs_are_same() -> None:
    assert stats.compare_samples(_samples(1.0, 0.01), _samples(0.8, 0.01, seed=1)).verdict == "faster"
    xs = _samples(1.0, 0.01)
    assert stats.compare_samples(xs, list(xs)).verdict == "same"


@pytest.mark.parametrize("n", [1, 2, 7, 50, 51])
def test_exact_bootstrap_medians_match_brute_force_resampling(n: int) -> None:
    rng = np.random.default_rng(5)
    xs = rng.lognormal(0.0, 0.3, size=n)
    fast = stats.boot_medians(xs, 40_000, np.random.default_rng(1))
    brute = np.median(xs[rng.integers(0, n, size=(40_000, n))], axis=1)
    # Same distribution: the CDFs agree at every value the brute-force medians take.
    for v in np.quantile(brute, [0.025, 0.1, 0.25, 0.5, 0.75, 0.9, 0.975]):
        assert np.mean(fast <= v) == pytest.approx(np.mean(brute <= v), abs=0.015)


def test_bootstrap_cost_does_not_grow_with_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    # Cost is counted as random numbers drawn, not measured in seconds: a wall-clock bound would
    # depend on this machine's load. Resampling 200,000 values outright would draw 200,000 per resample.
    drawn: list[int] = []
    real = np.random.default_rng

    class Counting:
        def __init__(self, seed: int) -> None:
            self.rng = real(seed)

        def __getattr__(self, name: str) -> Any:
            method = getattr(self.rng, name)

            def draw(*args: Any, size: Any = None, **kwargs: Any) -> Any:
                drawn.append(int(np.prod(size)) if size is not None else 1)
                return method(*args, size=size, **kwargs)
            return draw

    monkeypatch.setattr(np.random, "default_rng", Counting)
    costs = {}
    for n in (20, 200_000):
        xs = list(np.random.RandomState(n).normal(1.0, 0.01, size=n))
        drawn.clear()
        r = stats.ratio_of_medians(xs, xs, resamples=2000)
        costs[n] = sum(drawn)
        assert r.lo < 1.0 < r.hi
    assert r.hi - r.lo < 0.001
    assert costs[200_000] == costs[20] <= 4 * 2000  # at most two draws per resample and side


def _around(median: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, 0.002)) for _ in range(n)]


def test_a_ratio_over_repeats_spans_what_moved_between_measurements() -> None:
    # Three measurements whose ratios are 1.10, 0.95 and 1.00, each tight (+-0.2% noise, 2000 samples a side).
    moved = (1.10, 0.95, 1.00)
    pairs = [(_around(3.0 * r, 2000, 2 * i), _around(3.0, 2000, 2 * i + 1)) for i, r in enumerate(moved)]
    each = [stats.ratio_of_medians(num, den) for num, den in pairs]
    assert all(r.hi - r.lo < 0.01 for r in each)  # one measurement alone says +-0.5%
    r = stats.ratio_over_repeats(pairs)
    assert r.repeats == pytest.approx(moved, rel=0.003)  # in the order measured
    assert r.value == pytest.approx(1.00, rel=0.003)  # their median
    assert r.lo == min(e.lo for e in each) and r.hi == max(e.hi for e in each)
    assert r.lo < 0.95 and r.hi > 1.10
    assert stats.judge(r, 0.002).verdict == "same"  # each alone would have said faster, slower and same
    assert [stats.judge(e, 0.002).verdict for e in each] == ["slower", "faster", "same"]


def test_a_ratio_over_one_measurement_is_its_ratio_and_none_is_an_error() -> None:
    num, den = _around(2.0, 500, 1), _around(1.0, 500, 2)
    assert stats.ratio_over_repeats([(num, den)]) == stats.ratio_of_medians(num, den)
    assert stats.ratio_of_medians(num, den).to_dict()["repeats"] == ()
    with pytest.raises(ValueError, match="at least one measurement"):
        stats.ratio_over_repeats([])


def test_repeat_noise_is_the_medians_relative_stdev() -> None:
    assert stats.repeat_noise([]) == 0.0 and stats.repeat_noise([3.0]) == 0.0
    assert stats.repeat_noise([2.0, 2.0, 2.0]) == 0.0
    assert stats.repeat_noise([1.0, 2.0, 3.0]) == pytest.approx(statistics.stdev([1, 2, 3]) / 2.0)
    # It raises the bar of a verdict whose samples alone are tight.
    old, new = _around(3.0, 500, 1), _around(3.18, 500, 2)
    assert stats.compare_samples(old, new).verdict == "slower"
    assert stats.compare_samples(old, new, between=0.05).verdict == "same"
