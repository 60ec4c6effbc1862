"""Leak drift: the rate at which a pool's conservation gap grows, and when the pool runs out.

A least-squares line through the known gaps of the last ``window`` seconds gives the leak rate in
slots per second (> 0: slots are being lost; < 0: counted twice ever more).  With the rate and the
slots a new request could still get (``available + evictable``), the time until exhaustion is
``free / rate``.

Only a sustained leak gets an ETA: the points must span at least a quarter of the window and the
gap must have grown at least ``min_rises`` times within it.  A one-off step (two slots lost once)
tilts the fitted line too, but is not extrapolated into a forecast.  Pure; time is passed in.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

__all__ = ["GapSeries", "Trend", "fit_slope"]


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
        self._points: deque[tuple[float, float]] = deque()
        self._free: int | None = None
        self._cached: tuple[Trend | None] | None = None  # the trend until the next change

    def add(self, t: float, gap: int, free: int | None) -> None:
        if free != self._free:
            self._free, self._cached = free, None
        if self._points:
            last_t, last_gap = self._points[-1]
            if t <= last_t or (gap == last_gap and t - last_t < self._window / 256):
                return  # out of order, or nothing new worth a point
        self._points.append((t, float(gap)))
        self._cached = None
        while self._points[0][0] < t - self._window:
            self._points.popleft()

    def trend(self) -> Trend | None:
        """The fitted rate (and the exhaustion ETA when leaking), once there are enough points."""
        if self._cached is None:
            self._cached = (self._fit(),)
        return self._cached[0]

    def _fit(self) -> Trend | None:
        points = list(self._points)
        if len(points) < self._min_points:
            return None
        rate = fit_slope(points)
        if rate is None:
            return None
        rate = 0.0 if abs(rate) < 1e-12 else rate
        return Trend(rate, self._eta(points, rate))

    def _eta(self, points: list[tuple[float, float]], rate: float) -> float | None:
        if rate <= 0 or self._free is None or points[-1][1] <= 0:
            return None
        rises = sum(1 for (_, a), (_, b) in itertools.pairwise(points) if b > a)
        if rises < self._min_rises or points[-1][0] - points[0][0] < self._window / 4:
            return None
        return max(0.0, self._free / rate)
