"""The stranded-hold and admission-stall families, judged by the sidecar's detector on synthetic
snapshot streams: when each fires, at which severity, with which owners named, and what stays quiet
(transfers within their bound, load, a rank out of room, a PD decode waiting for its KV)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from tests.detect.streams import WORKER, RankStream, exact

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.stall import ADMISSION_STALL
from poolwatch.detect.schema import Severity
from poolwatch.detect.stranded import STRANDED_HOLD, HoldThresholds, stranded
from poolwatch.model.holds import Hold, Holder, HoldReason
from poolwatch.model.progress import Progress
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from rigs.fakes.clock import FakeClock

CFG = DetectorConfig()
VLLM = replace(WORKER, engine="vllm")


def holding(stream: RankStream, *holds: Hold, progress: Progress | None = None) -> Snapshot:
    snap = stream.next(exact(Pool.FULL, 0, held=500))
    return replace(snap, holds=holds, progress=progress or Progress())


def recv_hold(oldest: float, *, slots: int = 7, timeout: float | None = 480.0) -> Hold:
    owners = (Holder("dead-prefill-\x1b[31m", slots, oldest, aborted=True),)
    named = tuple(replace(o, owner="B") for o in owners)
    return Hold(Pool.FULL, HoldReason.KV_RECV, slots, 1, oldest, timeout, named, "decoder_kv_blocks_ttl")


def alerts_named(alerts: list[Alert], name: str) -> list[Alert]:
    return [a for a in alerts if a.name == name]


def test_a_hold_past_the_engines_bound_and_the_grace_fires_naming_its_owner() -> None:
    clock = FakeClock()
    stream = RankStream(clock, worker=VLLM, strict=None)
    detector = Detector(CFG, clock)
    start = clock.now
    fired_at = None
    for _ in range(700):
        detector.observe(holding(stream, recv_hold(start)))
        mine = alerts_named(detector.evaluate(), STRANDED_HOLD)
        if mine and fired_at is None:
            fired_at = clock.now - start
            alert = mine[0]
    assert fired_at is not None
    assert 540 < fired_at <= 541  # 480 s of decoder_kv_blocks_ttl and 60 s of grace
    assert alert.state is AlertState.FIRING
    assert alert.severity is Severity.WARNING  # 7 blocks of 10,000
    text = alert.annotations["description"]
    assert "7 blocks of the full pool" in text
    assert "kv_recv" in text
    assert "480 s (decoder_kv_blocks_ttl)" in text
    assert "'B' (7 blocks, aborted, 541 s)" in text
    assert "vLLM will not free them by itself" in text


def test_a_young_transfer_and_a_hold_within_its_bound_stay_quiet_and_clean_samples_resolve() -> None:
    clock = FakeClock()
    stream = RankStream(clock, worker=VLLM, strict=None)
    detector = Detector(replace(CFG, resolve_hold=2.0, resolve_samples=2), clock)
    for i in range(30):
        detector.observe(holding(stream, recv_hold(clock.now - 1.0 - i % 3, slots=300)))
        assert alerts_named(detector.evaluate(), STRANDED_HOLD) == []
    detector.observe(holding(stream, recv_hold(clock.now - 2000.0, slots=600)))
    [alert] = alerts_named(detector.evaluate(), STRANDED_HOLD)
    assert alert.severity is Severity.CRITICAL  # 600 blocks of 10,000: the large share
    for _ in range(5):
        detector.observe(holding(stream))
        states = [a.state for a in alerts_named(detector.evaluate(), STRANDED_HOLD)]
    assert states == [AlertState.RESOLVED]


def test_without_an_engine_bound_the_default_applies_and_a_configured_limit_overrides_both() -> None:
    snap = replace(holding(RankStream(FakeClock())), taken_at=10_000.0)
    lock = Hold(Pool.FULL, HoldReason.TREE_LOCK, 40, 2, 10_000.0 - 601, None)
    lease = Hold(Pool.FULL, HoldReason.KV_SEND, 9, 1, 10_000.0 - 95, 30.0)
    snap = replace(snap, holds=(lock, lease))
    assert stranded(snap, CFG) == [lock, lease]  # 601 > 600; 95 > 30 + 60
    assert stranded(snap, DetectorConfig(families=(HoldThresholds(hold_limit=700.0),))) == []
    assert stranded(snap, DetectorConfig(families=(HoldThresholds(hold_grace=70.0),))) == [lock]


def test_holds_below_the_minimum_or_from_a_source_without_progress_say_nothing() -> None:
    clock = FakeClock()
    detector = Detector(DetectorConfig(families=(HoldThresholds(hold_min_slots=8),)), clock)
    stream = RankStream(clock, worker=VLLM, strict=None)
    detector.observe(holding(stream, recv_hold(clock.now - 5000, slots=7)))
    assert alerts_named(detector.evaluate(), STRANDED_HOLD) == []
    old_probe = replace(holding(stream, recv_hold(clock.now - 5000, slots=70)), progress=None)
    assert StrandedJudge.judged(old_probe) == set()


class StrandedJudge:
    @staticmethod
    def judged(snap: Snapshot) -> set[object]:
        from poolwatch.detect.families.holds import StrandedHolds
        from poolwatch.detect.family import Seen

        return set(StrandedHolds(CFG).judged(Seen(snap, {})))


Make = Callable[[int, float], Progress]


def stalled(
    steps: int, since: float, *, waiting: int = 3, recent: tuple[tuple[float, str], ...] = ()
) -> Progress:
    return Progress(
        admitted=10,
        waiting=waiting,
        stalled_steps=steps,
        stalled_since=since,
        head=("w1", "w2"),
        recent=recent,
    )


def run_stall(make: Make, n: int, *, available: int = 5000) -> list[Alert]:
    clock = FakeClock()
    stream = RankStream(clock, worker=VLLM, strict=None)
    detector = Detector(CFG, clock)
    start = clock.now
    out: list[Alert] = []
    for i in range(n):
        snap = stream.next(exact(Pool.FULL, 0, available=available, held=10_000 - available - 100))
        detector.observe(replace(snap, progress=make(i, start)))
        out = alerts_named(detector.evaluate(), ADMISSION_STALL)
    return out


def test_a_stall_with_room_free_fires_critical_once_it_lasts_enough_steps_and_seconds() -> None:
    [alert] = run_stall(lambda i, start: stalled(i * 2, start), 35)
    assert alert.severity is Severity.CRITICAL
    text = alert.annotations["description"]
    assert "for 68 steps (35 s)" in text
    assert "3 request(s) it could admit wait (first in line: 'w1', 'w2')" in text
    assert "room free (full 51%)" in text
    assert run_stall(lambda i, start: stalled(i * 2, start), 25) == []  # 48 steps but 25 s


@pytest.mark.parametrize(
    ("make", "available"),
    [
        pytest.param(
            lambda i, start: stalled(i * 2, start), 500, id="out of room: load or a leak, not a stall"
        ),
        pytest.param(lambda i, start: stalled(i * 2, start, waiting=0), 5000, id="nothing admittable waits"),
        pytest.param(lambda i, start: stalled(i % 5, start), 5000, id="progress every few steps"),
    ],
)
def test_what_is_not_a_stall_stays_quiet(make: Make, available: int) -> None:
    assert run_stall(make, 60, available=available) == []


def test_fruitless_preemptions_in_the_window_warn_of_a_cascade_naming_the_victims() -> None:
    def make(i: int, start: float) -> Progress:
        recent = tuple((start + t, f"R{t}") for t in (1, 2, 3) if t <= i)
        return replace(stalled(0, 0.0), recent=recent, preempted=len(recent), fruitless=len(recent))

    [alert] = run_stall(make, 5)
    assert alert.severity is Severity.WARNING
    assert "3 preemptions" in alert.annotations["description"]
    assert "'R1', 'R2', 'R3'" in alert.annotations["description"]
    late = run_stall(lambda i, start: replace(make(3, start - 400)), 5)
    assert late == []  # older than the window
