"""The detector's count of alerts that started firing: what wakes the deliverers at once."""

from __future__ import annotations

from tests.detect.streams import RankStream

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from rigs.fakes.clock import FakeClock

CFG = DetectorConfig(deficit_samples=3, resolve_samples=3, resolve_hold=5.0, coarse_hold=20.0)


def fired_after_each(gaps: list[int]) -> list[int]:
    clock = FakeClock()
    stream = RankStream(clock)
    detector = Detector(CFG, clock)
    counts = []
    for gap in gaps:
        detector.observe(stream.next(gap=gap))
        detector.evaluate()
        counts.append(detector.fired())
    return counts


def test_a_surplus_counts_once_when_it_fires_and_not_again_while_it_keeps_firing() -> None:
    assert fired_after_each([0, 0, -1, -1, -1, -1]) == [0, 0, 1, 1, 1, 1]


def test_a_deficit_counts_only_once_it_has_lasted_its_samples() -> None:
    assert fired_after_each([0, 2, 2, 2, 2]) == [0, 0, 0, 1, 1]


def test_an_alert_that_resolves_and_fires_again_counts_twice() -> None:
    counts = fired_after_each([-1] + [0] * 10 + [-1])
    assert counts[0] == 1
    assert counts[-1] == 2


def test_a_healthy_stream_never_counts() -> None:
    assert fired_after_each([0] * 20) == [0] * 20
