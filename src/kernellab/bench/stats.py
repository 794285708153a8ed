"""Pure statistics over timing samples: summaries, stopping signals, speedup intervals, verdicts.

No GPU and no torch here. Summaries are plain Python; the bootstrap uses numpy and draws
resampled medians from their exact distribution, so its cost does not grow with the sample count.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: A change smaller than this is never called a regression, however tight the interval.
MIN_EFFECT = 0.03
#: ... nor one smaller than this many times the noise of the noisier run.
NOISE_FACTOR = 2.0
#: IQR / 1.349 estimates the standard deviation of normal data without being moved by outliers.
IQR_TO_SIGMA = 1.349


@dataclass(frozen=True)
class Summary:
    """Location and spread of one set of samples (same unit as the samples)."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    mean: float
    stdev: float
    min: float
    max: float
    rel_stdev: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on already sorted data."""
    if not sorted_xs:
        raise ValueError("quantile of no samples")
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> Summary:
    """Median, quartiles, IQR, mean, stdev, min, max, n and relative stdev (stdev / mean)."""
    xs = sorted(samples)
    if not xs:
        raise ValueError("summary of no samples")
    mean, stdev = _mean_stdev(xs)
    q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
    return Summary(
        n=len(xs), median=quantile(xs, 0.5), q1=q1, q3=q3, iqr=q3 - q1, mean=mean, stdev=stdev,
        min=xs[0], max=xs[-1], rel_stdev=stdev / mean if mean > 0 else math.inf,
    )


def _mean_stdev(xs: Sequence[float]) -> tuple[float, float]:
    # statistics.stdev is exact but slow on 10^5 samples; fsum keeps this accurate enough.
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


class Running:
    """Count, sum and relative stdev of a growing sample set, updated in O(1) (Welford)."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self._mean = 0.0
        self._m2 = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        self.total += x
        delta = x - self._mean
        self._mean += delta / self.n
        self._m2 += delta * (x - self._mean)

    @property
    def rel_stdev(self) -> float:
        """stdev / mean: the stopping rule's noise figure (inf for fewer than two samples)."""
        if self.n < 2 or self._mean <= 0:
            return math.inf
        return math.sqrt(self._m2 / (self.n - 1)) / self._mean


def robust_noise(samples: Sequence[float]) -> float:
    """Relative spread that one slow outlier cannot inflate: (IQR / 1.349) / median."""
    s = summarize(samples)
    return (s.iqr / IQR_TO_SIGMA) / s.median if s.median > 0 else math.inf


def repeat_noise(medians: Sequence[float]) -> float:
    """Relative spread between repeated measurements of one case (their medians' stdev / mean): what one
    measurement's samples cannot show (0 for fewer than two)."""
    if len(medians) < 2:
        return 0.0
    mean, stdev = _mean_stdev(medians)
    return stdev / mean if mean > 0 else math.inf


def plateaued(history: Sequence[float], window: int = 4, tolerance: float = 0.05) -> bool:
    """True once the noise estimate stopped moving: more samples would not make the run quieter.

    Over the last `window` checks the estimate stayed within `tolerance` of its own mean.
    """
    if len(history) < window:
        return False
    last = history[-window:]
    if any(math.isinf(x) or math.isnan(x) for x in last):
        return False
    mean = math.fsum(last) / len(last)
    return mean > 0 and (max(last) - min(last)) <= tolerance * mean


@dataclass(frozen=True)
class Ratio:
    """median(numerator) / median(denominator) with a bootstrap confidence interval; over repeated measurements
    (ratio_over_repeats), each measurement's ratio in `repeats`."""

    value: float
    lo: float
    hi: float
    level: float = 0.95
    repeats: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_of_medians(
    numerator: Sequence[float], denominator: Sequence[float], *,
    level: float = 0.95, resamples: int = 2000, seed: int = 0,
) -> Ratio:
    """Ratio of medians with a percentile bootstrap interval (each side resampled on its own).

    Seeded, so the same samples always give the same interval.
    """
    import numpy as np

    num, den = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if num.size == 0 or den.size == 0:
        raise ValueError("ratio of medians needs samples on both sides")
    rng = np.random.default_rng(seed)
    value = float(np.median(num) / np.median(den))
    ratios = boot_medians(num, resamples, rng) / boot_medians(den, resamples, rng)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return Ratio(value=value, lo=float(lo), hi=float(hi), level=level)


def ratio_over_repeats(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *, level: float = 0.95) -> Ratio:
    """The ratio of medians of one pair measured several times, each (numerator, denominator) its own measurement:
    the median of the measurements' ratios, with an interval from the lowest of their bootstrap intervals' ends to
    the highest. One measurement's interval sees only the noise within it; what moves between measurements (a
    handful of microseconds' worth of launch and clock state) it cannot see, and the span does."""
    if not pairs:
        raise ValueError("ratio over repeats needs at least one measurement")
    each = [ratio_of_medians(num, den, level=level) for num, den in pairs]
    if len(each) == 1:
        return each[0]
    values = sorted(r.value for r in each)
    return Ratio(value=quantile(values, 0.5), lo=min(r.lo for r in each), hi=max(r.hi for r in each), level=level,
                 repeats=tuple(r.value for r in each))


def boot_medians(xs, resamples: int, rng):
    """Medians of `resamples` bootstrap resamples of xs, drawn exactly in O(resamples).

    Resampling n values = drawing n uniform indices floor(n*U); floor is monotone, so the j-th
    smallest resampled value is xs_sorted[floor(n * U_(j))], and the j-th smallest of n uniforms is
    Beta(j, n-j+1). The next order statistic is U_(j) + (1-U_(j)) * Beta(1, n-j). So no resample is
    ever materialised, and a tiny kernel's 10^5 samples cost what 10 do.
    """
    import numpy as np

    xs = np.sort(xs)
    n = xs.size
    k = (n - 1) // 2                      # 0-based rank of the (lower) middle value
    u = rng.beta(k + 1, n - k, size=resamples)
    lower = xs[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lower
    v = u + (1.0 - u) * rng.beta(1, n - k - 1, size=resamples)
    return (lower + xs[np.minimum((v * n).astype(np.int64), n - 1)]) / 2.0


@dataclass(frozen=True)
class Verdict:
    """How a new run's time compares with an old one's: 'same', 'faster' or 'slower'."""

    verdict: str
    ratio: Ratio          # new median / old median: above 1 is slower
    threshold: float      # the smallest relative change this pair of runs can call real
    noise: float          # the noisier run's robust relative spread

    @property
    def change(self) -> float:
        """Relative change in time: +0.05 is 5% slower."""
        return self.ratio.value - 1.0


def compare_samples(old: Sequence[float], new: Sequence[float], *, seed: int = 0, between: float = 0.0) -> Verdict:
    """Call a change real only if its interval excludes 1 and it exceeds max(3%, 2x noise).

    Noise is the robust relative spread of the noisier of the two runs, so a quiet new run cannot
    hide behind an old run's noise and vice versa, or `between` where that is larger: the spread between
    repeated measurements of the case (repeat_noise), which neither run's samples show.
    """
    return judge(ratio_of_medians(new, old, seed=seed), max(robust_noise(old), robust_noise(new), between))


def judge(ratio: Ratio, noise: float) -> Verdict:
    """The verdict rule for any new/old time ratio with its interval: real only past max(3%, 2x noise)."""
    threshold = max(MIN_EFFECT, NOISE_FACTOR * noise)
    if ratio.lo > 1.0 and ratio.value - 1.0 > threshold:
        verdict = "slower"
    elif ratio.hi < 1.0 and 1.0 / ratio.value - 1.0 > threshold:
        verdict = "faster"
    else:
        verdict = "same"
    return Verdict(verdict=verdict, ratio=ratio, threshold=threshold, noise=noise)
