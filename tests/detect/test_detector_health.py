"""Log incidents, the probe's health, stale ranks and dead targets."""

from __future__ import annotations

from dataclasses import replace

from tests.detect.streams import RankStream

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.schema import Severity
from poolwatch.errors import Reason
from poolwatch.model.rank import IncidentKind, Pool, PoolAccount
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

CFG = DetectorConfig(
    incident_hold=900.0, stale_after=10.0, stale_for=60.0, target_down_for=120.0, resolve_hold=30.0
)
SEED_MESSAGE = (
    "token_to_kv_pool_allocator memory leak detected! full_available_size=1663695, full_evictable_size=1066, "
    "self.token_to_kv_pool_allocator.size=1664761, self.tree_cache.full_protected_size()=0\n"
    "mamba_available_size=473, mamba_evictable_size=4, self.req_to_token_pool.mamba_pool.size=476, "
    "self.tree_cache.mamba_protected_size()=0"
)


def states(
    detector: Detector, name: str, store: SnapshotStore | None = None
) -> list[tuple[Severity, AlertState]]:
    return [(a.severity, a.state) for a in evaluate(detector, store) if a.name == name]


def evaluate(detector: Detector, store: SnapshotStore | None = None) -> list[Alert]:
    """The sidecar's timer turn: the detector judges the store's latest snapshots and targets."""
    if store is None:
        return detector.evaluate()
    return detector.evaluate(latest=store.latest(), targets=store.targets())


def test_the_seed_leak_message_raises_idle_check_failed_with_its_figures(clock: FakeClock) -> None:
    figures = (PoolAccount(Pool.FULL, 1664761, 1663695, 1066, 0), PoolAccount(Pool.MAMBA, 476, 473, 4, 0))
    leak = Incident(IncidentKind.LEAK_DETECTED, SEED_MESSAGE, clock.now, figures)
    detector = Detector(CFG, clock)
    detector.observe(RankStream(clock, strict=None).next(incidents=(leak,)))
    [alert] = [a for a in detector.evaluate() if a.name == "PoolwatchIdleCheckFailed"]
    assert (alert.severity, alert.state) == (Severity.CRITICAL, AlertState.FIRING)
    assert "pool" not in dict(alert.labels)
    description = alert.annotations["description"]
    assert "mamba: surplus of at least 1 slot (double free)" in description
    assert "token_to_kv_pool_allocator memory leak detected!" in description
    assert "the strict idle check crashes the server" in description


def test_a_leak_warning_where_the_idle_check_only_warns_is_a_warning(clock: FakeClock) -> None:
    leak = Incident(IncidentKind.LEAK_DETECTED, "pool memory leak detected! [full] total=10", clock.now)
    detector = Detector(CFG, clock)
    detector.observe(RankStream(clock, strict=False).next(incidents=(leak,)))
    assert states(detector, "PoolwatchIdleCheckFailed") == [(Severity.WARNING, AlertState.FIRING)]


def test_a_scheduler_exception_fires_at_once_and_resolves_after_the_hold(clock: FakeClock) -> None:
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception: Traceback", clock.now)
    detector = Detector(CFG, clock)
    detector.observe(RankStream(clock).next(incidents=(crash,)))
    assert states(detector, "PoolwatchSchedulerCrashed") == [(Severity.CRITICAL, AlertState.FIRING)]
    clock.advance(899)
    assert states(detector, "PoolwatchSchedulerCrashed") == [(Severity.CRITICAL, AlertState.FIRING)]
    clock.advance(2)
    assert states(detector, "PoolwatchSchedulerCrashed") == [(Severity.CRITICAL, AlertState.RESOLVED)]


def test_a_crash_line_older_than_the_hold_is_old_news(clock: FakeClock) -> None:
    old = Incident(IncidentKind.BUSY_CHECK_FAILED, "Mem Leak Detected!", clock.now - 3600)
    detector = Detector(CFG, clock)
    detector.observe(RankStream(clock).next(incidents=(old,)))
    assert detector.evaluate() == []


INCIDENT_ALERTS = ("PoolwatchIdleCheckFailed", "PoolwatchSchedulerCrashed")


def crashed(clock: FakeClock) -> tuple[RankStream, Detector]:
    """A rank whose idle check failed and whose scheduler then died (the seed incident)."""
    stream, detector = RankStream(clock), Detector(CFG, clock)
    leak = Incident(IncidentKind.LEAK_DETECTED, "memory leak detected! [full] total=10", clock.now)
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", clock.now)
    detector.observe(stream.next(incidents=(leak, crash)))
    return stream, detector


def incident_alerts(detector: Detector) -> dict[str, AlertState]:
    return {a.name: a.state for a in detector.evaluate() if a.name in INCIDENT_ALERTS}


def test_a_restart_resolves_the_crash_and_the_failed_idle_check_with_a_reason(clock: FakeClock) -> None:
    stream, detector = crashed(clock)
    assert incident_alerts(detector) == dict.fromkeys(INCIDENT_ALERTS, AlertState.FIRING)
    clock.advance(40)
    stream.restart()
    detector.observe(stream.next())
    resolved = [a for a in detector.evaluate() if a.name in INCIDENT_ALERTS]
    assert {a.name: a.state for a in resolved} == dict.fromkeys(INCIDENT_ALERTS, AlertState.RESOLVED)
    assert all("restarted" in a.annotations["resolved_reason"] for a in resolved)
    clock.advance(60)
    detector.observe(stream.next())
    assert incident_alerts(detector) == dict.fromkeys(INCIDENT_ALERTS, AlertState.RESOLVED)


def test_without_a_restart_the_crash_stays_firing_for_the_incident_hold(clock: FakeClock) -> None:
    stream, detector = crashed(clock)
    for _ in range(89):  # the same boot keeps reporting for 890 s
        clock.advance(9)
        detector.observe(stream.next())
    assert incident_alerts(detector) == dict.fromkeys(INCIDENT_ALERTS, AlertState.FIRING)
    clock.advance(20)
    assert incident_alerts(detector) == dict.fromkeys(INCIDENT_ALERTS, AlertState.RESOLVED)


def test_a_restart_ends_a_crash_whose_log_clock_runs_ahead(clock: FakeClock) -> None:
    stream, detector = RankStream(clock), Detector(CFG, clock)
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", clock.now + 300)
    detector.observe(stream.next(incidents=(crash,)))  # the log's timestamps are 5 min ahead
    assert incident_alerts(detector) == {"PoolwatchSchedulerCrashed": AlertState.FIRING}
    stream.restart()
    detector.observe(stream.next())  # the order poolwatch read them in decides, not the log's clock
    assert incident_alerts(detector) == {"PoolwatchSchedulerCrashed": AlertState.RESOLVED}


def test_a_crash_of_the_new_boot_fires_again(clock: FakeClock) -> None:
    stream, detector = crashed(clock)
    stream.restart()
    detector.observe(stream.next())
    assert incident_alerts(detector)["PoolwatchSchedulerCrashed"] is AlertState.RESOLVED
    again = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", clock.now + 1)
    detector.observe(stream.next(incidents=(again,)))
    assert incident_alerts(detector)["PoolwatchSchedulerCrashed"] is AlertState.FIRING


def test_a_disabled_probe_is_a_warning_after_a_minute_and_contained_errors_are_info(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock, probe=ProbeHealth(samples_total=1, disabled=True, last_error="kill switch"))
    for _ in range(60):  # 59 s after the first sample
        detector.observe(stream.next())
    assert states(detector, "PoolwatchProbeDegraded") == [(Severity.WARNING, AlertState.PENDING)]
    detector.observe(stream.next())
    assert states(detector, "PoolwatchProbeDegraded") == [(Severity.WARNING, AlertState.FIRING)]

    detector = Detector(CFG, clock)
    stream.probe = ProbeHealth(samples_total=10, errors_total=2)
    detector.observe(stream.next())
    assert states(detector, "PoolwatchProbeDegraded") == []
    stream.probe = ProbeHealth(samples_total=11, errors_total=5, last_error="AttributeError: free_slots")
    detector.observe(stream.next())
    [alert] = [a for a in detector.evaluate() if a.name == "PoolwatchProbeDegraded"]
    assert (alert.severity, alert.state, alert.value) == (Severity.INFO, AlertState.FIRING, 3.0)
    assert (
        "contained 3 error(s) recently; last: AttributeError: free_slots" in alert.annotations["description"]
    )


def test_probe_errors_leave_the_window_and_the_alert_resolves(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock, step=30.0, probe=ProbeHealth(errors_total=0))
    detector.observe(stream.next())
    stream.probe = ProbeHealth(errors_total=1)
    seen = []
    for _ in range(30):
        detector.observe(stream.next())
        seen.append(states(detector, "PoolwatchProbeDegraded"))
    assert seen[0] == [(Severity.INFO, AlertState.FIRING)]
    assert seen[-1] == [(Severity.INFO, AlertState.RESOLVED)]


def stored(clock: FakeClock, snap: Snapshot) -> tuple[SnapshotStore, Detector]:
    store = SnapshotStore()
    detector = Detector(CFG, clock)
    store.subscribe(detector.observe)
    store.put(snap)
    return store, detector


def test_a_rank_that_stops_reporting_goes_stale_on_the_timer(clock: FakeClock) -> None:
    stream = RankStream(clock)
    store, detector = stored(clock, stream.next())
    clock.advance(10.5)
    assert states(detector, "PoolwatchSnapshotStale", store) == [(Severity.WARNING, AlertState.PENDING)]
    clock.advance(60)
    assert states(detector, "PoolwatchSnapshotStale", store) == [(Severity.WARNING, AlertState.FIRING)]
    store.put(stream.next())  # fresh again: the hold time starts
    assert states(detector, "PoolwatchSnapshotStale", store) == [(Severity.WARNING, AlertState.FIRING)]
    clock.advance(28)
    store.put(stream.next())
    assert states(detector, "PoolwatchSnapshotStale", store) == [(Severity.WARNING, AlertState.RESOLVED)]


def test_a_target_down_fires_after_two_minutes_and_a_flapping_one_never(clock: FakeClock) -> None:
    store, detector = stored(clock, RankStream(clock).next())
    store.record_failure("probe:prefill-0", "probe", 2.0, Reason.CONNECT, "connection refused")
    store.record_failure("metrics:decode-0", "sglang-metrics", 2.0, Reason.TIMEOUT, "timed out")
    for second in range(121):
        up = second % 2 == 0
        if up:
            store.record_success("metrics:decode-0", "sglang-metrics", 0.1, at=clock.now)
        else:
            store.record_failure("metrics:decode-0", "sglang-metrics", 2.0, Reason.TIMEOUT, "timed out")
        store.put(replace(store.latest()[0], seq=1000 + second, taken_at=clock.now))
        evaluate(detector, store)
        clock.advance(1)
    [alert] = [a for a in evaluate(detector, store) if a.name == "PoolwatchTargetDown"]
    assert alert.state is AlertState.FIRING
    assert alert.all_labels == {
        "alertname": "PoolwatchTargetDown",
        "severity": "warning",
        "target": "probe:prefill-0",
        "source": "probe",
    }
    assert "never succeeded): connection refused" in alert.annotations["description"]
    assert "var-worker" not in alert.annotations["dashboard_url"]
