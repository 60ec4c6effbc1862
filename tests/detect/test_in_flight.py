"""The freed-in-flight family (PoolwatchFreedInFlight): a ``freed_in_flight`` tripwire pages its own
critical alert, naming the blocks and the requests; the balance family pages no double free or leak
for it (the books balance), and a real double free beside it still pages as itself."""

from __future__ import annotations

from dataclasses import replace

from tests.detect.streams import WORKER, RankStream, exact

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.balance import DOUBLE_FREE, SLOT_LEAK
from poolwatch.detect.families.in_flight import FREED_IN_FLIGHT
from poolwatch.detect.schema import Severity
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import ProbeHealth
from rigs.fakes.clock import FakeClock

EARLY = Tripwire(TripwireKind.FREED_IN_FLIGHT, Pool.FULL, (17, 18, 19), "free_blocks", 41, ("req-7",))


def _run(trips: tuple[Tripwire, ...], gap: int = 0, n: int = 3) -> dict[str, list[Alert]]:
    s = RankStream(FakeClock(), worker=replace(WORKER, engine="vllm"), strict=None, probe=ProbeHealth())
    detector = Detector(DetectorConfig(), s.clock)
    out: dict[str, list[Alert]] = {}
    for _ in range(n):
        detector.observe(replace(s.next(exact(Pool.FULL, gap)), tripwires=trips))
        for alert in detector.evaluate():
            out.setdefault(alert.name, []).append(alert)
    return out


def test_blocks_freed_in_flight_page_critical_at_once_with_blocks_and_requests_and_no_double_free() -> None:
    seen = _run((EARLY,))
    alert = seen[FREED_IN_FLIGHT][0]
    assert alert.state is AlertState.FIRING
    assert alert.severity is Severity.CRITICAL
    assert alert.value == 3
    text = alert.annotations["description"]
    assert "Tripwire freed_in_flight: 3 blocks [17-19] first seen after free_blocks at iteration 41" in text
    assert "requests [req-7]" in text
    assert "Nothing is counted twice or lost" in text
    assert DOUBLE_FREE not in seen
    assert SLOT_LEAK not in seen


def test_a_real_double_free_beside_it_pages_as_itself() -> None:
    twice = Tripwire(TripwireKind.REF_BELOW_OWNERS, Pool.FULL, (3,), "free_blocks", 40, ("req-2",))
    seen = _run((EARLY, twice), gap=-1)
    assert FREED_IN_FLIGHT in seen
    assert DOUBLE_FREE in seen
    assert "freed_in_flight" not in seen[DOUBLE_FREE][0].annotations["description"]


def test_a_clean_probe_snapshot_is_a_verdict_and_resolves_it() -> None:
    s = RankStream(FakeClock(), worker=replace(WORKER, engine="vllm"), strict=None, probe=ProbeHealth())
    detector = Detector(DetectorConfig(resolve_hold=0.0), s.clock)
    detector.observe(replace(s.next(exact(Pool.FULL, 0)), tripwires=(EARLY,)))
    assert [a.name for a in detector.evaluate()] == [FREED_IN_FLIGHT]
    for _ in range(3):
        detector.observe(s.next(exact(Pool.FULL, 0)))
    assert all(a.state is AlertState.RESOLVED for a in detector.evaluate() if a.name == FREED_IN_FLIGHT)
