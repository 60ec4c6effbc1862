"""The detector's state machine over synthetic snapshot streams (one sample per second)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.detect.streams import WORKER, RankStream, coarse, exact
from tests.helpers import SEED_DOUBLE_FREE_LABELS

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.detect.alert import Alert, AlertState, _labels
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.schema import Severity
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Phase, Pool
from rigs.fakes.clock import FakeClock

CFG = DetectorConfig(deficit_samples=3, resolve_samples=3, resolve_hold=5.0, coarse_hold=20.0)


def mamba(alerts: list[Alert], name: str) -> Alert | None:
    found = [a for a in alerts if a.name == name and dict(a.labels).get("pool") == "mamba"]
    assert len(found) <= 1
    return found[0] if found else None


def run(gaps: list[int], strict: bool | None = None) -> list[tuple[str, str, str] | None]:
    """Feed one exact mamba gap per second; after each, the mamba alert as (name, severity, state)."""
    clock = FakeClock()
    stream = RankStream(clock, strict=strict)
    detector = Detector(CFG, clock)
    out: list[tuple[str, str, str] | None] = []
    for g in gaps:
        detector.observe(stream.next(gap=g))
        alerts = [a for a in detector.evaluate() if dict(a.labels).get("pool") == "mamba"]
        assert len(alerts) <= 1, alerts
        out.append((alerts[0].name, alerts[0].severity.value, alerts[0].state.value) if alerts else None)
    return out


DF = ("PoolwatchDoubleFree", "critical")
LEAK = ("PoolwatchSlotLeak", "critical")


@pytest.mark.parametrize(
    ("gaps", "expected"),
    [
        pytest.param([0, -1], [None, (*DF, "firing")], id="a surplus fires at once"),
        pytest.param(
            [0, 2, 2, 2],
            [None, (*LEAK, "pending"), (*LEAK, "pending"), (*LEAK, "firing")],
            id="a deficit fires after three samples",
        ),
        pytest.param(
            [1, 0, 1, 0, 1, 0, 1, 0, 1],
            [(*LEAK, "pending"), None] * 4 + [(*LEAK, "pending")],
            id="a gap oscillating between 0 and 1 never fires",
        ),
        pytest.param(
            [2, 2, 0, 2, 2],
            [(*LEAK, "pending"), (*LEAK, "pending"), None, (*LEAK, "pending"), (*LEAK, "pending")],
            id="one clean sample restarts the deficit count",
        ),
        pytest.param(
            [-1, 0, -1, 0, -1, 0, -1, 0, -1, 0],
            [(*DF, "firing")] * 10,
            id="a firing alert does not flap when the gap flickers",
        ),
        pytest.param(
            [-1, 0, 0, 0, 0, 0, 0],
            [(*DF, "firing")] * 5 + [(*DF, "resolved")] * 2,
            id="resolution waits for three clean samples and the hold time",
        ),
    ],
)
def test_conservation_alerts_follow_the_gap(gaps: list[int], expected: list[object]) -> None:
    assert run(gaps) == expected


def test_a_deficit_where_the_idle_check_only_warns_is_a_warning() -> None:
    assert run([2, 2, 2], strict=False)[-1] == ("PoolwatchSlotLeak", "warning", "firing")


def test_a_deficit_of_five_percent_of_the_pool_is_critical_even_without_the_strict_check() -> None:
    assert run([24, 24, 24], strict=False)[-1] == ("PoolwatchSlotLeak", "critical", "firing")


def test_a_snapshot_seen_again_at_the_same_iteration_does_not_count_as_a_new_sample(clock: FakeClock) -> None:
    stream = RankStream(clock)
    detector = Detector(CFG, clock)
    snap = stream.next(gap=3)
    for _ in range(5):
        clock.advance(1)
        detector.observe(replace(snap, taken_at=clock.now))
    alert = mamba(detector.evaluate(), "PoolwatchSlotLeak")
    assert alert is not None
    assert alert.state is AlertState.PENDING


def test_the_seed_double_free_is_paged_with_the_crash_ahead(clock: FakeClock) -> None:
    stream = RankStream(clock, strict=True)
    detector = Detector(MixinConfig(CFG, runbook_base_url="https://runbooks.example/poolwatch"), clock)
    wire = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (17,), "process_prefill_chunk", 101)
    detector.observe(stream.next(exact(Pool.FULL, 0), exact(Pool.MAMBA, -1), tripwires=(wire,)))
    alert = mamba(detector.evaluate(), "PoolwatchDoubleFree")
    assert alert is not None
    assert (alert.state, alert.severity) == (AlertState.FIRING, Severity.CRITICAL)
    assert alert.all_labels == SEED_DOUBLE_FREE_LABELS
    description = alert.annotations["description"]
    assert "counts 1 slot twice (gap -1): a double free" in description
    assert (
        "Tripwire free_and_live: 1 slot [17] first seen after process_prefill_chunk at iteration 101"
        in description
    )
    assert "the server will crash at its next idle moment" in description
    assert alert.annotations["runbook_url"] == "https://runbooks.example/poolwatch/PoolwatchDoubleFree.md"
    assert alert.annotations["dashboard_url"] == (
        "http://grafana.monitoring.svc:3000/d/poolwatch-worker/poolwatch-worker?var-worker=prefill-0"
        "&var-dp_rank=0&var-tp_rank=1&var-pp_rank=0&var-pool=mamba"
    )


def test_a_tripwire_alone_fires_at_once_and_a_missing_slot_is_a_leak(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    dup = Tripwire(TripwireKind.FREE_DUPLICATE, Pool.FULL, (5, 9), "cache_finished_req", 7)
    lost = Tripwire(TripwireKind.MISSING, Pool.MAMBA, (3,), "census", 7)
    detector.observe(stream.next(tripwires=(dup, lost)))
    fired = {(a.name, dict(a.labels)["pool"], a.state) for a in detector.evaluate()}
    assert fired == {
        ("PoolwatchDoubleFree", "full", AlertState.FIRING),
        ("PoolwatchSlotLeak", "mamba", AlertState.FIRING),
    }


def test_a_paged_tripwire_says_its_ids_are_pages_and_round_trips(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    dup = Tripwire(TripwireKind.FREE_DUPLICATE, Pool.SWA, (1808,), "cache_finished_req", 7, page_size=16)
    snap = stream.next(tripwires=(dup,))
    assert parse_snapshot(dump_snapshot(snap)).tripwires == (dup,)
    assert (
        "page_size" not in dump_snapshot(stream.next(tripwires=(replace(dup, page_size=1),)))["tripwires"][0]
    )
    detector.observe(snap)
    [alert] = [a for a in detector.evaluate() if a.name == "PoolwatchDoubleFree"]
    assert "Tripwire free_duplicate: 1 page of 16 slots [1808]" in alert.annotations["description"]


def test_coarse_figures_prove_a_surplus_at_once_and_an_idle_residual_only_after_the_hold(
    clock: FakeClock,
) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    detector.observe(stream.next(coarse(Pool.MAMBA, -1), phase=Phase.BUSY))
    assert mamba(detector.evaluate(), "PoolwatchDoubleFree") is not None
    detector = Detector(CFG, clock)
    states = []
    for _ in range(25):
        detector.observe(stream.next(coarse(Pool.FULL, 4), phase=Phase.IDLE))
        states.append([a.state for a in detector.evaluate() if a.name == "PoolwatchSlotLeak"])
    assert states[3] == [AlertState.PENDING]  # three samples, but not yet 20 s
    assert states[20] == [AlertState.FIRING]


def test_busy_coarse_figures_prove_nothing(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    for _ in range(10):
        detector.observe(stream.next(coarse(Pool.FULL, 4000), phase=Phase.BUSY))
    assert detector.evaluate() == []


def test_a_restarted_rank_starts_clean(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    detector.observe(stream.next(exact(Pool.FULL, 5), exact(Pool.MAMBA, -1)))
    before = {(a.name, a.state) for a in detector.evaluate()}
    assert before == {("PoolwatchDoubleFree", AlertState.FIRING), ("PoolwatchSlotLeak", AlertState.PENDING)}
    stream.restart()
    detector.observe(stream.next())
    after = {(a.name, a.state) for a in detector.evaluate()}
    # the pending leak never happened; the double free, last seen at the restart, holds like the
    # Prometheus rule (keep_firing_for = resolve_hold) until the new boot has been clean long enough
    assert after == {("PoolwatchDoubleFree", AlertState.FIRING)}
    for _ in range(CFG.resolve_samples + int(CFG.resolve_hold)):
        detector.observe(stream.next())
    assert {(a.name, a.state) for a in detector.evaluate()} == {("PoolwatchDoubleFree", AlertState.RESOLVED)}


def test_a_restart_that_shows_the_double_free_again_keeps_one_alert_firing(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    detector.observe(stream.next(gap=-1))
    (first,) = detector.evaluate()
    stream.restart()
    for _ in range(10):
        detector.observe(stream.next(gap=-1))
    (again,) = detector.evaluate()
    assert (again.state, again.fired_at) == (AlertState.FIRING, first.fired_at)  # no resolve, no re-page


def test_a_resolved_alert_is_listed_for_the_retention_time_then_forgotten(clock: FakeClock) -> None:
    cfg = replace(CFG, retention=60.0)
    detector = Detector(cfg, clock)
    stream = RankStream(clock)
    for g in [-1, 0, 0, 0, 0, 0, 0]:
        detector.observe(stream.next(gap=g))
    assert [a.state for a in detector.evaluate()] == [AlertState.RESOLVED]
    clock.advance(61)
    assert detector.evaluate() == []


def test_the_same_condition_after_resolution_fires_a_new_alert(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    stream = RankStream(clock)
    for g in [-1, 0, 0, 0, 0, 0, 0]:
        detector.observe(stream.next(gap=g))
    first = detector.evaluate()[0]
    detector.observe(stream.next(gap=-1))
    second = detector.evaluate()[0]
    assert first.state is AlertState.RESOLVED
    assert second.state is AlertState.FIRING
    assert second.active_since > first.active_since


def test_an_exact_deficit_while_fully_idle_fires_at_once(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    detector.observe(RankStream(clock).next(exact(Pool.FULL, 0), exact(Pool.MAMBA, 1), phase=Phase.IDLE))
    alert = mamba(detector.evaluate(), "PoolwatchSlotLeak")
    assert alert is not None
    assert (alert.state, alert.severity) == (AlertState.FIRING, Severity.CRITICAL)


def test_a_coarse_source_that_cannot_tell_does_not_resolve_what_the_probe_proved(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    probe = RankStream(clock)
    detector.observe(probe.next(gap=-1))
    for _ in range(20):
        clock.advance(1)
        detector.observe(replace(probe.snapshot([coarse(Pool.MAMBA, 300)]), source="sglang-metrics"))
    assert [a.state for a in detector.evaluate()] == [AlertState.FIRING]
    for _ in range(6):
        detector.observe(probe.next(gap=0))
    assert [a.state for a in detector.evaluate()] == [AlertState.RESOLVED]


def test_two_sources_proving_one_double_free_make_one_alert_that_ends_when_both_are_clean(
    clock: FakeClock,
) -> None:
    detector = Detector(CFG, clock)
    probe = RankStream(clock)
    log = RankStream(clock, boot_id="")
    detector.observe(probe.next(gap=-1))
    detector.observe(replace(log.next(coarse(Pool.MAMBA, -1), phase=Phase.IDLE), source="sglang-log"))
    [alert] = detector.evaluate()
    assert alert.state is AlertState.FIRING
    for _ in range(6):
        detector.observe(probe.next(gap=0))
    assert [a.state for a in detector.evaluate()] == [AlertState.FIRING]  # the log still says so
    for _ in range(6):
        detector.observe(replace(log.next(coarse(Pool.MAMBA, 0), phase=Phase.IDLE), source="sglang-log"))
    assert [a.state for a in detector.evaluate()] == [AlertState.RESOLVED]


def test_a_restart_seen_by_one_source_ends_the_old_boot_s_alerts_of_every_source(clock: FakeClock) -> None:
    detector = Detector(CFG, clock)
    probe = RankStream(clock)
    log = RankStream(clock, boot_id="")
    detector.observe(probe.next(exact(Pool.FULL, -2)))
    detector.observe(replace(log.next(coarse(Pool.MAMBA, -1), phase=Phase.IDLE), source="sglang-log"))
    probe.restart()
    detector.observe(probe.next())
    clock.advance(CFG.resolve_hold - 1)
    assert {a.state for a in detector.evaluate()} == {AlertState.FIRING}  # held like keep_firing_for
    clock.advance(1)
    states = {dict(a.labels)["pool"]: a.state for a in detector.evaluate()}
    assert states == {"full": AlertState.RESOLVED, "mamba": AlertState.RESOLVED}


def test_a_source_that_cannot_judge_the_new_boot_does_not_hold_the_old_boot_s_alert(
    clock: FakeClock,
) -> None:
    """The e2e restart: SGLang's leak report in the log proved a double free; after the restart
    the log only has busy (coarse) lines, which never count as clean samples."""
    detector = Detector(CFG, clock)
    log = RankStream(clock)
    detector.observe(replace(log.next(coarse(Pool.MAMBA, -1), phase=Phase.IDLE), source="sglang-log"))
    [fired] = detector.evaluate()
    log.restart()
    for _ in range(int(CFG.resolve_hold) + 1):
        detector.observe(replace(log.next(coarse(Pool.MAMBA, 300), phase=Phase.BUSY), source="sglang-log"))
    [alert] = detector.evaluate()
    assert (alert.fingerprint, alert.state) == (fired.fingerprint, AlertState.RESOLVED)


def test_a_new_boot_that_shows_the_old_boot_s_double_free_keeps_it_firing_past_the_hold(
    clock: FakeClock,
) -> None:
    detector = Detector(CFG, clock)
    probe = RankStream(clock)
    detector.observe(probe.next(gap=-1))
    probe.restart()
    for _ in range(int(CFG.resolve_hold) * 2):
        detector.observe(probe.next(gap=-1))
    assert [a.state for a in detector.evaluate()] == [AlertState.FIRING]


def test_a_forgotten_rank_resolves_its_alerts_with_the_reason_and_leaves_no_state(clock: FakeClock) -> None:
    detector = Detector(replace(CFG, retention=60.0), clock)
    gone, stays = RankStream(clock), RankStream(clock, worker=replace(WORKER, tp_rank=0))
    detector.observe(gone.next(gap=-1))
    detector.observe(stays.next(gap=-1))
    assert detector.forget([gone.worker.key], "gone for good") == 1
    by_tp = {dict(a.labels)["tp_rank"]: a for a in detector.evaluate()}
    assert (by_tp["1"].state, by_tp["1"].annotations["resolved_reason"]) == (
        AlertState.RESOLVED,
        "gone for good",
    )
    assert by_tp["0"].state is AlertState.FIRING
    assert "resolved_reason" not in by_tp["0"].annotations
    clock.advance(61)
    detector.evaluate()
    assert detector.sizes() == {"rank_sources": 1, "alerts": 1}


def test_forgetting_ranks_drops_the_memo_of_their_label_sets(clock: FakeClock) -> None:
    """Issue 24 item 7: under churn of new worker names the memo kept 16,384 gone ranks' labels."""
    detector = Detector(CFG, clock)
    streams = [RankStream(clock, worker=replace(WORKER, worker=f"churn-{n}")) for n in range(50)]
    for stream in streams:
        detector.observe(stream.next(gap=-1))
    detector.evaluate()
    assert _labels.cache_info().currsize >= 50
    detector.forget([s.worker.key for s in streams], "gone for good")
    assert _labels.cache_info().currsize == 0
