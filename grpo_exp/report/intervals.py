"""A configuration's objective over its seeds, with a bootstrap confidence interval, and how two compare.

RL runs differ from seed to seed, so one number per configuration can crown a winner by chance. Following
Agarwal et al. ("Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021): the centre of a
configuration's seeds is their interquartile mean once there are enough of them (one collapsed seed moves
it less than the mean), its interval a percentile bootstrap over the seeds (``scipy.stats.bootstrap``), and
two configurations compare by the probability of improvement P(X > Y): the chance that a seed of X beats a
seed of Y (ties count half), with its own bootstrap interval over both sets of seeds. The bootstrap is
seeded (``sweep.verdict.seed``), so a report rebuilt from the same jobs gives the same intervals.

scipy and numpy load inside the functions: importing the report costs neither.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpo_exp.config.schema import VerdictSettings

# The interquartile mean drops this share of the seeds at each end (Agarwal et al.'s IQM).
QUARTILE = 0.25
# The percentile bootstrap: defined for every statistic, where BCa's jackknife breaks down on seeds that
# all scored alike (a probability of improvement of exactly 1 is common).
METHOD = "percentile"
MEAN, IQM = "mean", "IQM"
# Two objectives this close are one number rounded two ways, not a difference: rewards are float32 means
# (epsilon 1.2e-7), so seeds that all scored alike can land a few ulps apart. Relative, with a floor for zero.
FLOAT_NOISE = 1e-6
FLOAT_NOISE_FLOOR = 1e-12


@dataclass(frozen=True)
class Interval:
    """The objective over one configuration's seeds: their centre and its confidence interval.

    ``low``/``high`` are None for a single seed: one run says nothing about its spread."""

    values: tuple[float, ...]
    centre: float
    statistic: str  # MEAN or IQM
    low: float | None = None
    high: float | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def overlaps(self, other: Interval) -> bool:
        """Whether the two intervals share a point (closed intervals, widened by float noise); False when either
        has none."""
        if not (self.bounded and other.bounded):
            return False
        return _at_most(self.low, other.high) and _at_most(other.low, self.high)


@dataclass(frozen=True)
class Improvement:
    """P(X > Y): the chance that a seed of X does better than a seed of Y, with its interval (None without one)."""

    probability: float
    low: float | None = None
    high: float | None = None


def interval(values: Sequence[float], settings: VerdictSettings) -> Interval:
    """The centre of ``values`` (interquartile mean from ``settings.interquartile_from`` seeds, else the mean)
    and its bootstrap interval at ``settings.confidence``; no interval for one seed."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    statistic = IQM if len(data) >= settings.interquartile_from else MEAN
    centre = float(_centre(data, statistic))
    if len(data) < 2:
        return Interval(tuple(values), centre, statistic)
    if np.ptp(data) == 0:  # every seed scored the same: no resample differs
        return Interval(tuple(values), centre, statistic, centre, centre)
    low, high = _bootstrap((data,), lambda x, axis: _centre(x, statistic, axis), settings)
    return Interval(tuple(values), centre, statistic, low, high)


def probability_of_improvement(
    better: Sequence[float], worse: Sequence[float], settings: VerdictSettings, maximize: bool = True
) -> Improvement:
    """P(``better`` > ``worse``) over their seeds (lower is better when not ``maximize``), with its bootstrap
    interval when both have two seeds or more."""
    import numpy as np

    sign = 1.0 if maximize else -1.0
    x, y = sign * np.asarray(better, dtype=float), sign * np.asarray(worse, dtype=float)
    point = float(_improvement(x, y))
    if len(x) < 2 or len(y) < 2:
        return Improvement(point)
    if np.ptp(np.concatenate([x, y])) == 0:
        return Improvement(point, point, point)
    low, high = _bootstrap((x, y), _improvement, settings)
    return Improvement(point, low, high)


def seeds_to_separate(a: Interval, b: Interval) -> int | None:
    """About how many seeds per configuration would part two overlapping intervals, were their gap real.

    An interval narrows as 1/sqrt(seeds): the margins facing each other, scaled from each one's seeds to n,
    must add up to less than the gap between the centres. None when the centres are equal (no gap to
    show) or either has no interval."""
    if not (a.bounded and b.bounded):
        return None
    upper, lower = (a, b) if a.centre >= b.centre else (b, a)
    if same_number(upper.centre, lower.centre):
        return None
    gap = upper.centre - lower.centre
    facing = (upper.centre - upper.low) * math.sqrt(upper.n) + (lower.high - lower.centre) * math.sqrt(lower.n)
    return math.floor((facing / gap) ** 2) + 1


def same_number(a: float, b: float) -> bool:
    """Whether ``a`` and ``b`` differ by float noise only (``FLOAT_NOISE``)."""
    return math.isclose(a, b, rel_tol=FLOAT_NOISE, abs_tol=FLOAT_NOISE_FLOOR)


def _at_most(a: float, b: float) -> bool:
    return a <= b or same_number(a, b)


def _centre(data: Any, statistic: str, axis: int = -1) -> Any:
    import numpy as np
    from scipy import stats

    return stats.trim_mean(data, QUARTILE, axis=axis) if statistic == IQM else np.mean(data, axis=axis)


def _improvement(x: Any, y: Any, axis: int = -1) -> Any:
    """P(X > Y) (ties half, float noise a tie) over every pair of a seed of ``x`` and one of ``y``; vectorised over
    leading axes."""
    import numpy as np

    x, y = np.moveaxis(x, axis, -1)[..., :, None], np.moveaxis(y, axis, -1)[..., None, :]
    tie = np.isclose(x, y, rtol=FLOAT_NOISE, atol=FLOAT_NOISE_FLOOR)
    return (((x > y) & ~tie) + 0.5 * tie).mean(axis=(-2, -1))


def _bootstrap(data: tuple[Any, ...], statistic: Any, settings: VerdictSettings) -> tuple[float, float]:
    """scipy's percentile bootstrap of ``statistic`` over ``data`` (each sample resampled on its own)."""
    import numpy as np
    from scipy import stats

    result = stats.bootstrap(
        data,
        statistic,
        n_resamples=settings.resamples,
        vectorized=True,
        confidence_level=settings.confidence,
        method=METHOD,
        rng=np.random.default_rng(settings.seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)
