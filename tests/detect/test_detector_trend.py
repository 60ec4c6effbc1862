"""Leak rate and time to exhaustion."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.detect.streams import RankStream, exact

from poolwatch.detect.alert import AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.trend import GapSeries, Trend, fit_slope
from poolwatch.model.rank import Pool
from rigs.fakes.clock import FakeClock

T0 = 1_761_907_243.0


def trend_of(gap: Callable[[int], int], seconds: int, *, window: float = 900.0, free: int = 100) -> Trend:
    """The trend of a rank whose gap is ``gap(i)`` at second ``i`` of ``seconds`` (``free`` slots)."""
    series = GapSeries(window=window)
    for i in range(seconds):
        series.add(T0 + i, gap(i), free=free)
    trend = series.trend()
    assert trend is not None
    return trend


@given(
    slope=st.floats(min_value=-1e3, max_value=1e3, allow_nan=False),
    intercept=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    n=st.integers(min_value=2, max_value=60),
    step=st.floats(min_value=0.01, max_value=100.0),
)
def test_the_fitted_slope_of_points_on_a_line_is_the_line_s_slope(
    slope: float, intercept: float, n: int, step: float
) -> None:
    points = [(T0 + i * step, intercept + slope * i * step) for i in range(n)]
    fitted = fit_slope(points)
    assert fitted is not None
    assert math.isclose(fitted, slope, rel_tol=1e-6, abs_tol=1e-6)


@given(st.lists(st.integers(min_value=-5, max_value=5), min_size=1, max_size=3).map(lambda xs: xs[:1] * 10))
def test_a_constant_gap_has_no_slope(ys: list[int]) -> None:
    assert fit_slope([(T0 + i, float(y)) for i, y in enumerate(ys)]) == 0.0


def test_a_single_moment_has_no_slope() -> None:
    assert fit_slope([(T0, 1.0)]) is None
    assert fit_slope([(T0, 1.0), (T0, 2.0)]) is None


def test_a_sustained_leak_gets_a_rate_and_an_exhaustion_eta() -> None:
    trend = trend_of(lambda i: i // 10, 901, free=2000)  # one slot lost every 10 s, 2000 slots still free
    assert trend.eta is not None
    assert trend.rate == pytest.approx(0.1, rel=0.01)
    assert trend.eta == pytest.approx(20_000, rel=0.01)


def test_a_one_off_step_is_not_extrapolated_into_a_forecast() -> None:
    trend = trend_of(lambda i: 0 if i < 450 else 2, 900)
    assert trend.rate > 0
    assert trend.eta is None


def test_a_double_free_trend_is_negative_and_never_exhausts() -> None:
    trend = trend_of(lambda i: -(i // 100), 900)
    assert trend.rate < 0
    assert trend.eta is None


def test_points_older_than_the_window_are_forgotten() -> None:
    trend = trend_of(lambda i: 50 if i < 500 else 0, 1000, window=100.0)
    assert trend.rate == 0.0


def test_the_detector_forecasts_exhaustion_of_a_steadily_leaking_pool(clock: FakeClock) -> None:
    cfg = DetectorConfig(trend_window=600.0, forecast_for=300.0, exhaustion_horizon=4 * 3600.0)
    detector = Detector(cfg, clock)
    stream = RankStream(clock, strict=False, step=5.0)
    fired_after = None
    for i in range(240):  # 20 minutes, one slot lost per minute; free + evictable = 176 - gap
        detector.observe(stream.next(exact(Pool.MAMBA, i // 12, available=150, held=300)))
        forecast = [a for a in detector.evaluate() if a.name == "PoolwatchPoolExhaustionForecast"]
        if forecast and forecast[0].state is AlertState.FIRING and fired_after is None:
            fired_after = i * 5.0
    assert fired_after is not None
    assert 300 <= fired_after <= 900
    [trend] = [t for t in detector.trends() if t.pool is Pool.MAMBA]
    assert trend.trend.rate == pytest.approx(1 / 60, rel=0.05)
    assert trend.trend.eta == pytest.approx((176 - 19) * 60, rel=0.05)
