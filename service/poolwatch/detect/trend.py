"""Leak drift: the rate at which a pool's conservation gap grows, and when the pool runs out.

A least-squares line through the known gaps of the last ``window`` seconds gives the leak rate in
slots per second (> 0: slots are being lost; < 0: counted twice ever more).  With the rate and the
slots a new request could still get (``available + evictable``), the time until exhaustion is
``free / rate``.

Only a sustained leak gets an ETA: the points must span at least a quarter of the window and the
gap must have grown at least ``min_rises`` times within it.  A one-off step (two slots lost once)
tilts the fitted line too, but is not extrapolated into a forecast.  Pure; time is passed in.

Cost: the fit is kept incrementally -- running sums of ``t``, ``y``, ``t*t`` and ``t*y`` (times
taken from a per-series origin, so the squares stay small) and counts of rises and falls between
neighbours, updated as a point comes and as one leaves the window -- so adding a point and asking
for the trend are O(1).  The sums are recomputed from the points (O(window)) after as many
removals as there are points, so rounding never accumulates and the cost stays O(1) amortised.
The points are two arrays of doubles (16 bytes a point, not the ~110 of a tuple of two floats):
1,000 ranks with four pools each hold about a million points over a 900 s window.
:func:`fit_slope` is the plain batch fit (the reference the tests compare with).

The detector keeps one :class:`GapSeries` per pool of each rank as one source sees it and hands each
snapshot the fitted ones (:func:`fitted`, read by the forecast family); :func:`best_trends` lists
every pool's trend for the API and the exporter, the probe's where a rank has two sources.  Pools are
taken in :class:`~poolwatch.model.rank.Pool` order, looked up in a table built once.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from poolwatch.model.rank import Pool, SourceKind, WorkerId

__all__ = ["GapSeries", "PoolTrend", "Trend", "best_trends", "fit_slope", "fitted"]

_ORDER = {pool: index for index, pool in enumerate(Pool)}


@dataclass(frozen=True, slots=True)
class Trend:
    rate: float  # slots per second
    eta: float | None  # seconds until the pool has no free slot left; None unless leaking


def fit_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(t, y)`` points; None with fewer than 2 distinct times."""
    n = len(points)
    if n < 2:
        return None
    t_mean = sum(t for t, _ in points) / n
    y_mean = sum(y for _, y in points) / n
    sxx = sum((t - t_mean) ** 2 for t, _ in points)
    if sxx <= 0:
        return None
    sxy = sum((t - t_mean) * (y - y_mean) for t, y in points)
    return sxy / sxx


class GapSeries:
    """The recent known gaps of one pool of one rank (one boot), at most ~256 points per window."""

    def __init__(self, window: float, min_points: int = 3, min_rises: int = 3) -> None:
        self._window = window
        self._min_points = min_points
        self._min_rises = min_rises
        self._t = array("d")  # t - origin of each point, oldest first
        self._y = array("d")  # its gap
        self._origin = 0.0
        self._sums = _Sums()
        self._free: int | None = None
        self._cached: tuple[Trend | None] | None = None  # the trend until the next change

    def add(self, t: float, gap: int, free: int | None) -> None:
        if free != self._free:
            self._free, self._cached = free, None
        ts, ys = self._t, self._y
        if not ts:
            self._origin = t
        else:
            last_t = ts[-1] + self._origin
            if t <= last_t or (gap == ys[-1] and t - last_t < self._window / 256):
                return  # out of order, or nothing new worth a point
        point = (t - self._origin, float(gap))
        self._sums.add(point, (ts[-1], ys[-1]) if ts else None)
        ts.append(point[0])
        ys.append(point[1])
        self._cached = None
        while ts[0] < point[0] - self._window:
            gone = (ts[0], ys[0])
            del ts[0], ys[0]
            self._sums.remove(gone, (ts[0], ys[0]))
        if self._sums.removed >= len(ts):
            self._rebase()

    def _rebase(self) -> None:
        """Times from the oldest point, and the sums afresh (after every len(points) removals)."""
        shift = self._t[0]
        self._origin += shift
        self._t = array("d", (t - shift for t in self._t))
        self._sums = _Sums()
        previous = None
        for point in zip(self._t, self._y, strict=True):
            self._sums.add(point, previous)
            previous = point

    def trend(self) -> Trend | None:
        """The fitted rate (and the exhaustion ETA when leaking), once there are enough points."""
        if self._cached is None:
            self._cached = (self._fit(),)
        return self._cached[0]

    def _fit(self) -> Trend | None:
        if len(self._t) < self._min_points:
            return None
        rate = self._sums.slope()
        if rate is None:
            return None
        rate = 0.0 if abs(rate) < 1e-12 else rate
        return Trend(rate, self._eta(rate))

    def _eta(self, rate: float) -> float | None:
        if rate <= 0 or self._free is None or self._y[-1] <= 0:
            return None
        if self._sums.rises < self._min_rises or self._t[-1] - self._t[0] < self._window / 4:
            return None
        return max(0.0, self._free / rate)


class _Sums:
    """Running least-squares sums of a window of points, and its rises and falls."""

    __slots__ = ("falls", "n", "removed", "rises", "st", "stt", "sty", "sy")

    def __init__(self) -> None:
        self.n = self.rises = self.falls = self.removed = 0
        self.st = self.sy = self.stt = self.sty = 0.0

    def add(self, point: tuple[float, float], previous: tuple[float, float] | None) -> None:
        self._count(point, 1)
        if previous is not None:
            self._step(previous[1], point[1], 1)

    def remove(self, point: tuple[float, float], following: tuple[float, float]) -> None:
        self._count(point, -1)
        self._step(point[1], following[1], -1)
        self.removed += 1

    def _count(self, point: tuple[float, float], sign: int) -> None:
        t, y = point
        self.n += sign
        self.st += sign * t
        self.sy += sign * y
        self.stt += sign * t * t
        self.sty += sign * t * y

    def _step(self, a: float, b: float, sign: int) -> None:
        if b > a:
            self.rises += sign
        elif b < a:
            self.falls += sign

    def slope(self) -> float | None:
        """The least-squares slope, as :func:`fit_slope` would give it (exactly 0 when flat)."""
        if self.n < 2:
            return None
        sxx = self.stt - self.st * self.st / self.n
        if sxx <= 1e-9 * max(1.0, self.stt):
            return None  # every point at (nearly) one moment
        if self.rises == 0 and self.falls == 0:
            return 0.0
        return (self.sty - self.st * self.sy / self.n) / sxx


@dataclass(frozen=True, slots=True)
class PoolTrend:
    worker: WorkerId
    pool: Pool
    trend: Trend


def fitted(series: Mapping[Pool, GapSeries]) -> tuple[tuple[Pool, Trend], ...]:
    """The pools of one rank-source with a fitted trend, in pool order, with their trends."""
    out = []
    for pool in sorted(series, key=_ORDER.__getitem__):
        trend = series[pool].trend()
        if trend is not None:
            out.append((pool, trend))
    return tuple(out)


def best_trends(ranks: Iterable[tuple[WorkerId, str, Mapping[Pool, GapSeries]]]) -> list[PoolTrend]:
    """Every pool's fitted trend (``(worker, source, series)`` per rank-source), one per rank and
    pool: of two sources of one rank, the probe's (exact) wins; ordered by rank, then pool."""
    best: dict[tuple[str, Pool], tuple[bool, PoolTrend]] = {}
    for worker, source, series in ranks:
        probe = source == SourceKind.PROBE
        for pool, gaps in series.items():
            trend = gaps.trend()
            key = (worker.key, pool)
            if trend is not None and (key not in best or (probe and not best[key][0])):
                best[key] = (probe, PoolTrend(worker, pool, trend))
    return [best[k][1] for k in sorted(best, key=lambda k: (k[0], _ORDER[k[1]]))]
