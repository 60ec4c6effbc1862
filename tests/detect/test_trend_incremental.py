"""The incremental trend fit gives what a batch fit of the window's points gives."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.detect.trend import GapSeries, fit_slope

T0 = 1_761_907_243.0
steps = st.lists(
    st.tuples(st.floats(0.01, 30.0), st.integers(-50, 50)), min_size=1, max_size=400
)  # (seconds since the previous point, gap)


def batch(points: list[tuple[float, float]], window: float, free: int) -> tuple[float | None, bool]:
    """The old way: refit every point of the window; (rate, leaking with an ETA)."""
    if len(points) < 3:
        return None, False
    rate = fit_slope(points)
    if rate is None:
        return None, False
    rises = sum(1 for (_, a), (_, b) in itertools.pairwise(points) if b > a)
    spans = points[-1][0] - points[0][0] >= window / 4
    return rate, rate > 1e-12 and rises >= 3 and spans and points[-1][1] > 0 and free >= 0


@settings(max_examples=150, deadline=None)
@given(steps, st.sampled_from([60.0, 900.0]))
def test_the_incremental_fit_matches_a_batch_fit_of_the_window_at_every_point(
    changes: list[tuple[float, int]], window: float
) -> None:
    series = GapSeries(window=window)
    kept: list[tuple[float, float]] = []
    t = T0
    for gap_seconds, gap in changes:
        t += gap_seconds
        series.add(t, gap, free=100)
        if not (kept and gap == kept[-1][1] and t - kept[-1][0] < window / 256):  # else: no new point
            kept.append((t, float(gap)))
            kept = [p for p in kept if p[0] >= t - window]
        rate, leaking = batch(kept, window, 100)
        trend = series.trend()
        if rate is None:
            assert trend is None
            continue
        assert trend is not None
        assert trend.rate == pytest.approx(rate, rel=1e-6, abs=1e-9)
        assert (trend.eta is not None) == leaking


def test_a_long_flat_stream_keeps_an_exactly_zero_rate_through_many_rebases() -> None:
    series = GapSeries(window=60.0)
    for i in range(20_000):
        series.add(T0 + i * 0.7, 3, free=10)
    trend = series.trend()
    assert trend is not None
    assert trend.rate == 0.0
