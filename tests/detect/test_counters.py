"""The counter-witness family (PoolwatchCounterDrift) on snapshots that carry counter witnesses.

A counter the census found off pages its own alert, with the counter, the drift and since when, in
the engine's words; the pool's figures are the census's (the probe publishes them so), so the
balance family pages no double free or leak for it -- and says so when a real one is there too.
"""

from __future__ import annotations

from dataclasses import replace

from tests.detect.streams import WORKER, RankStream, exact

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.balance import DOUBLE_FREE, SLOT_LEAK
from poolwatch.detect.families.counters import COUNTER_DRIFT
from poolwatch.detect.schema import Severity
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Phase, Pool
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.model.witness import CounterWitness
from rigs.fakes.clock import FakeClock

PROTECTED = CounterWitness(Pool.FULL, "protected", "tree_cache.protected_size()", 41, 0, 12, 9, 1.0)
NEGATIVE = CounterWitness(Pool.FULL, "protected", "tree_cache.protected_size()", -12, 12, 20, 8, 1.0)
FREE_COUNT = CounterWitness(
    Pool.FULL, "available", "block_pool.free_block_queue.num_free_blocks", 16, 15, 5, 5, 1.0
)


def _run(stream: RankStream, snaps: list[Snapshot]) -> dict[str, list[Alert]]:
    detector = Detector(DetectorConfig(), stream.clock)
    out: dict[str, list[Alert]] = {}
    for snap in snaps:
        detector.observe(snap)
        for alert in detector.evaluate():
            out.setdefault(alert.name, []).append(alert)
    return out


def _stream(strict: bool | None = True, engine: str = "sglang") -> RankStream:
    worker = replace(WORKER, engine=engine)
    return RankStream(FakeClock(), worker=worker, strict=strict, probe=ProbeHealth())


def _with(snap: Snapshot, *found: CounterWitness) -> Snapshot:
    return replace(snap, witnesses=found)


def test_a_protected_drift_on_a_strict_sglang_rank_pages_critical_at_once_and_no_balance_alert() -> None:
    s = _stream()
    snaps = [_with(s.next(exact(Pool.FULL, 0), phase=Phase.IDLE), PROTECTED) for _ in range(5)]
    seen = _run(s, snaps)
    drift = seen[COUNTER_DRIFT]
    assert drift[0].state is AlertState.FIRING
    assert drift[0].severity is Severity.CRITICAL
    text = drift[0].annotations["description"]
    assert "tree_cache.protected_size() (protected) reads 41 slots; the census counts 0" in text
    assert "drift +41" in text
    assert "off since iteration 9" in text
    assert "No slot is lost or freed twice for it" in text
    assert "crashes the server" in text
    assert drift[0].value == 41
    assert DOUBLE_FREE not in seen
    assert SLOT_LEAK not in seen


def test_a_relaxed_sglang_rank_gets_a_warning_for_a_drift_its_idle_check_only_warns_on() -> None:
    s = _stream(strict=False)
    seen = _run(s, [_with(s.next(exact(Pool.FULL, 0)), PROTECTED) for _ in range(3)])
    alert = seen[COUNTER_DRIFT][0]
    assert alert.severity is Severity.WARNING
    assert "finds the pool off by 41 slots and, it only warns here" in alert.annotations["description"]


def test_a_counter_below_zero_is_critical_even_on_a_relaxed_rank_and_is_named() -> None:
    s = _stream(strict=False)
    seen = _run(s, [_with(s.next(exact(Pool.FULL, 0)), NEGATIVE) for _ in range(3)])
    alert = seen[COUNTER_DRIFT][0]
    assert alert.severity is Severity.CRITICAL
    text = alert.annotations["description"]
    assert "reads -12 slots; the census counts 12" in text
    assert "is below zero" in text
    assert alert.value == 24


def test_a_drift_that_cancels_what_the_ids_show_says_the_idle_check_sees_nothing() -> None:
    """#27666's shape: protected subtracted by hand by exactly what a real double free added."""
    cancels = CounterWitness(Pool.FULL, "protected", "tree_cache.protected_size()", 0, 12, 20, 8, 1.0)
    s = _stream(strict=True)
    trip = Tripwire(TripwireKind.FREE_AND_TREE, Pool.FULL, tuple(range(1, 13)), "recv_requests", 30)
    seen = _run(s, [_with(s.next(exact(Pool.FULL, -12), tripwires=(trip,)), cancels) for _ in range(2)])
    alert = seen[COUNTER_DRIFT][0]
    assert alert.severity is Severity.WARNING
    assert "they balance: the drift hides what the ids show" in alert.annotations["description"]
    assert DOUBLE_FREE in seen  # the ids' own finding pages as itself


def test_vllm_free_count_above_its_queue_is_critical_with_the_assertion_ahead() -> None:
    s = _stream(strict=None, engine="vllm")
    seen = _run(s, [_with(s.next(exact(Pool.FULL, 0)), FREE_COUNT) for _ in range(2)])
    alert = seen[COUNTER_DRIFT][0]
    assert alert.severity is Severity.CRITICAL
    assert "fails vLLM's assertion" in alert.annotations["description"]
    assert "1 block;" not in alert.annotations["description"]


def test_vllm_free_count_below_its_queue_is_a_warning() -> None:
    below = replace(FREE_COUNT, reported=13)
    s = _stream(strict=None, engine="vllm")
    seen = _run(s, [_with(s.next(exact(Pool.FULL, 0)), below) for _ in range(2)])
    assert seen[COUNTER_DRIFT][0].severity is Severity.WARNING


def test_a_real_double_free_beside_a_drift_pages_both_and_says_the_pool_is_judged_from_the_census() -> None:
    s = _stream()
    trip = Tripwire(TripwireKind.FREE_AND_TREE, Pool.FULL, tuple(range(1, 13)), "recv_requests", 30)
    snaps = [_with(s.next(exact(Pool.FULL, -12), tripwires=(trip,)), NEGATIVE) for _ in range(2)]
    seen = _run(s, snaps)
    assert COUNTER_DRIFT in seen
    assert DOUBLE_FREE in seen
    text = seen[DOUBLE_FREE][0].annotations["description"]
    assert "judged from the probe's census" in text
    assert "tree_cache.protected_size()" in text


def test_a_snapshot_without_witnesses_clears_the_alert_and_a_source_without_a_probe_is_not_judged() -> None:
    s = _stream()
    detector = Detector(DetectorConfig(resolve_hold=0.0), s.clock)
    detector.observe(_with(s.next(exact(Pool.FULL, 0)), PROTECTED))
    assert [a.name for a in detector.evaluate()] == [COUNTER_DRIFT]
    for _ in range(4):
        detector.observe(s.next(exact(Pool.FULL, 0)))
    assert all(a.state is AlertState.RESOLVED for a in detector.evaluate() if a.name == COUNTER_DRIFT)
    s.probe = None
    quiet = Detector(DetectorConfig(), s.clock)
    quiet.observe(s.next(exact(Pool.FULL, 0)))
    assert not [a for a in quiet.evaluate() if a.name == COUNTER_DRIFT]


def test_witnesses_travel_the_wire_with_a_counter_below_zero() -> None:
    s = _stream()
    snap = _with(s.next(exact(Pool.FULL, 0)), NEGATIVE, PROTECTED)
    back = parse_snapshot(dump_snapshot(snap))
    assert back.witnesses == snap.witnesses
    assert "witnesses" not in dump_snapshot(s.next())  # none: the form every earlier sidecar reads
