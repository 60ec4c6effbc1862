"""Each Prometheus rule's ``for:`` is the detector's own wait, under a non-default config.

Each case drives the detector (fake clock, one-second steps) with one alert's condition held
steady, measures the seconds from the first pending sighting to firing, and compares them with
the ``for:`` of that alert's rule of the same severity, generated from the same config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from tests.detect.streams import WORKER, RankStream, coarse, exact

from poolwatch.artifacts.rules import rule_groups
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.balance import DOUBLE_FREE, SLOT_LEAK
from poolwatch.detect.families.counters import COUNTER_DRIFT
from poolwatch.detect.families.forecast import POOL_EXHAUSTION_FORECAST
from poolwatch.detect.families.host_pool import HOST_POOL_GAP
from poolwatch.detect.families.in_flight import FREED_IN_FLIGHT
from poolwatch.detect.families.incidents import IDLE_CHECK_FAILED, SCHEDULER_CRASHED
from poolwatch.detect.families.probe_directory import PROBE_DIRECTORY_LOST, PROBE_REFUSED
from poolwatch.detect.families.probe_health import PROBE_DEGRADED
from poolwatch.detect.families.repairs import PROBE_REPAIRED
from poolwatch.detect.families.staleness import SNAPSHOT_STALE
from poolwatch.detect.families.stall import ADMISSION_STALL
from poolwatch.detect.families.targets import TARGET_DOWN
from poolwatch.detect.rules import alert_definitions
from poolwatch.detect.schema import Mode, Severity
from poolwatch.detect.stranded import STRANDED_HOLD
from poolwatch.model.findings import Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.holds import Hold, HoldReason
from poolwatch.model.progress import Progress
from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from poolwatch.model.witness import CounterWitness
from poolwatch.target_state import DirectoryHealth, TargetState
from rigs.fakes.clock import FakeClock

CONFIG = MixinConfig(
    DetectorConfig(
        deficit_samples=2,
        coarse_hold=150.0,
        stale_after=5.0,
        stale_for=210.0,
        target_down_for=330.0,
        probe_disabled_for=90.0,
        forecast_for=420.0,
        trend_window=300.0,
    )
)
Step = Callable[[], list[Alert]]
Case = Callable[[Detector, FakeClock, RankStream], Step]


def seconds(duration: str) -> float:
    for unit, factor in (("ms", 0.001), ("h", 3600), ("m", 60), ("s", 1)):
        number = duration.removesuffix(unit)
        if number != duration and number.isdigit():
            return int(number) * factor
    raise ValueError(duration)


def rule_wait(name: str, severity: Severity) -> float:
    """The ``for:`` of the alert's rules of that severity (one per engine: they must agree)."""
    rules = rule_groups(CONFIG)[0]["rules"]
    [wait] = {r.get("for", "0s") for r in rules if r["alert"] == name and r["labels"]["severity"] == severity}
    return seconds(wait)


def observing(detector: Detector, make: Callable[[], Snapshot]) -> Step:
    def step() -> list[Alert]:
        detector.observe(make())
        return detector.evaluate()

    return step


def showing(
    *accounts: PoolAccount, phase: Phase = Phase.BUSY, probe: ProbeHealth | None = None, **found: object
) -> Case:
    """A rank whose every snapshot shows ``accounts`` in ``phase`` (none: a balanced full and Mamba
    pool), from a probe of health ``probe`` where given, carrying ``found`` (its tripwires,
    repairs or counter witnesses)."""

    def case(d: Detector, c: FakeClock, s: RankStream) -> Step:
        if probe is not None:
            s.probe = probe
        return observing(d, lambda: replace(s.next(*accounts, phase=phase), **found))

    return case


IDLE = Phase.IDLE
surplus = showing(exact(Pool.MAMBA, -1))
host_surplus = showing(exact(Pool.HOST, -3, held=0))
host_deficit = showing(exact(Pool.HOST, 3, held=0), phase=IDLE)
coarse_idle_deficit = showing(coarse(Pool.FULL, 5), phase=IDLE)
large_idle_deficit = showing(coarse(Pool.FULL, 600), phase=IDLE)
probe_disabled = showing(probe=ProbeHealth(disabled=True, last_error="kill switch engaged"))
_REPAIR = Repair(RepairKind.QUARANTINE, Pool.MAMBA, 1, (5,), "process_prefill_chunk", 3, ("r1",))
guard_repaired = showing(probe=ProbeHealth(guard=True), repairs=(_REPAIR,))
_TRIP = Tripwire(TripwireKind.FREED_IN_FLIGHT, Pool.FULL, (4, 5), "free_blocks", 7, ("r1",))
freed_in_flight = showing(exact(Pool.FULL, 0), probe=ProbeHealth(), tripwires=(_TRIP,))


def counter_drift(figure: str, reported: int) -> Case:
    witness = CounterWitness(Pool.FULL, figure, "counter()", reported, 10, 5, 5, 0.0)
    return showing(exact(Pool.FULL, 0), probe=ProbeHealth(), witnesses=(witness,))


def steady_leak(d: Detector, c: FakeClock, s: RankStream) -> Step:
    # one slot a minute lost from 176 free + evictable slots: exhausted well within the horizon
    return observing(d, lambda: s.next(exact(Pool.MAMBA, (s.seq - 100) // 60, available=150, held=300)))


def logged(kind: IncidentKind) -> Callable[[Detector, FakeClock, RankStream], Step]:
    def case(d: Detector, c: FakeClock, s: RankStream) -> Step:
        return observing(d, lambda: s.next(incidents=(Incident(kind, "memory leak detected!", c.now + 1),)))

    return case


def gone_quiet(d: Detector, c: FakeClock, s: RankStream) -> Step:
    last = s.next()
    d.observe(last)

    def step() -> list[Alert]:
        c.advance(1.0)
        return d.evaluate(latest=[last])

    return step


def target_down(d: Detector, c: FakeClock, s: RankStream) -> Step:
    def step() -> list[Alert]:
        c.advance(1.0)
        return d.evaluate(targets=[TargetState("probe:a", "probe", up=False)])

    return step


def directory(health: DirectoryHealth) -> Case:
    def case(d: Detector, c: FakeClock, s: RankStream) -> Step:
        def step() -> list[Alert]:
            c.advance(1.0)
            return d.evaluate(directory=health)

        return step

    return case


def probe_errors(d: Detector, c: FakeClock, s: RankStream) -> Step:
    def make() -> Snapshot:
        s.probe = ProbeHealth(errors_total=s.seq)
        return s.next()

    return observing(d, make)


def stranded(slots: int) -> Callable[[Detector, FakeClock, RankStream], Step]:
    def case(d: Detector, c: FakeClock, s: RankStream) -> Step:
        since = c.now

        def make() -> Snapshot:
            hold = Hold(Pool.FULL, HoldReason.KV_RECV, slots, 1, since, 480.0)
            return replace(s.next(exact(Pool.FULL, 0)), holds=(hold,), progress=Progress())

        return observing(d, make)

    return case


def stalled(d: Detector, c: FakeClock, s: RankStream) -> Step:
    since = c.now
    waiting = Progress(waiting=2, stalled_steps=0, stalled_since=since)
    return observing(
        d, lambda: replace(s.next(exact(Pool.FULL, 0)), progress=replace(waiting, stalled_steps=s.seq - 100))
    )


def fruitless(d: Detector, c: FakeClock, s: RankStream) -> Step:
    def make() -> Snapshot:
        recent = tuple((c.now - t, f"r{t}") for t in range(min(s.seq - 100, 3)))
        return replace(s.next(exact(Pool.FULL, 0)), progress=Progress(fruitless=len(recent), recent=recent))

    return observing(d, make)


STRICT, WARNS = True, False  # SGLang's idle check: crashes on an imbalance, or only warns
VLLM = None  # a vLLM rank: no idle check of its own
CASES: list[tuple[str, Severity, Case, bool | None]] = [
    (DOUBLE_FREE, Severity.CRITICAL, surplus, STRICT),
    (SLOT_LEAK, Severity.CRITICAL, coarse_idle_deficit, STRICT),
    (SLOT_LEAK, Severity.WARNING, coarse_idle_deficit, WARNS),
    (SLOT_LEAK, Severity.WARNING, coarse_idle_deficit, VLLM),
    (SLOT_LEAK, Severity.CRITICAL, large_idle_deficit, VLLM),
    (DOUBLE_FREE, Severity.CRITICAL, surplus, VLLM),
    (POOL_EXHAUSTION_FORECAST, Severity.WARNING, steady_leak, WARNS),
    (IDLE_CHECK_FAILED, Severity.CRITICAL, logged(IncidentKind.LEAK_DETECTED), STRICT),
    (IDLE_CHECK_FAILED, Severity.WARNING, logged(IncidentKind.LEAK_DETECTED), WARNS),
    (SCHEDULER_CRASHED, Severity.CRITICAL, logged(IncidentKind.SCHEDULER_EXCEPTION), STRICT),
    (SNAPSHOT_STALE, Severity.WARNING, gone_quiet, STRICT),
    (TARGET_DOWN, Severity.WARNING, target_down, STRICT),
    (PROBE_DEGRADED, Severity.WARNING, probe_disabled, STRICT),
    (PROBE_DEGRADED, Severity.INFO, probe_errors, STRICT),
    (PROBE_REPAIRED, Severity.WARNING, guard_repaired, STRICT),
    (HOST_POOL_GAP, Severity.CRITICAL, host_surplus, STRICT),
    (HOST_POOL_GAP, Severity.WARNING, host_deficit, STRICT),
    (STRANDED_HOLD, Severity.WARNING, stranded(7), VLLM),
    (STRANDED_HOLD, Severity.CRITICAL, stranded(700), VLLM),
    (STRANDED_HOLD, Severity.WARNING, stranded(7), STRICT),
    (STRANDED_HOLD, Severity.CRITICAL, stranded(700), STRICT),
    (ADMISSION_STALL, Severity.CRITICAL, stalled, VLLM),
    (ADMISSION_STALL, Severity.WARNING, fruitless, VLLM),
    (FREED_IN_FLIGHT, Severity.CRITICAL, freed_in_flight, VLLM),
    (COUNTER_DRIFT, Severity.CRITICAL, counter_drift("protected", 41), STRICT),
    (COUNTER_DRIFT, Severity.WARNING, counter_drift("protected", 41), WARNS),
    (COUNTER_DRIFT, Severity.CRITICAL, counter_drift("available", 11), VLLM),
    (COUNTER_DRIFT, Severity.WARNING, counter_drift("available", 8), VLLM),
    (PROBE_DIRECTORY_LOST, Severity.CRITICAL, directory(DirectoryHealth("/d", lost="unsafe")), STRICT),
    (PROBE_DIRECTORY_LOST, Severity.WARNING, directory(DirectoryHealth("/d", lost="missing")), STRICT),
    (PROBE_REFUSED, Severity.WARNING, directory(DirectoryHealth("/d", refused={"/d": "unsafe: x"})), STRICT),
]


def detector_wait(name: str, severity: Severity, case: Case, strict: bool | None) -> float:
    """Seconds from the first sighting of the alert to its firing, one-second steps."""
    clock = FakeClock()
    detector = Detector(CONFIG, clock)
    worker = replace(WORKER, engine="vllm") if strict is VLLM else WORKER
    step = case(detector, clock, RankStream(clock, worker=worker, strict=strict))
    seen = None
    for _ in range(3600):
        mine = [a for a in step() if a.name == name and a.severity is severity]
        if mine and seen is None:
            seen = clock.now
        if any(a.state is AlertState.FIRING for a in mine):
            assert seen is not None
            return clock.now - seen
    raise AssertionError(f"{name} {severity} never fired")


def test_every_rule_of_every_alert_the_detector_raises_has_a_case() -> None:
    judged = {Mode.SAMPLED, Mode.EVENT, Mode.TIMED}  # the other alerts are Prometheus' alone
    raised = {a.name for a in alert_definitions(CONFIG) if a.mode in judged}
    rules = {(r["alert"], r["labels"]["severity"]) for r in rule_groups(CONFIG)[0]["rules"]}
    assert {r for r in rules if r[0] in raised} == {(n, s.value) for n, s, _, _ in CASES}


@pytest.mark.parametrize(
    ("name", "severity", "case", "strict"),
    CASES,
    ids=[f"{n}-{s.value}{'-vllm' if e is VLLM else ''}" for n, s, _, e in CASES],
)
def test_the_rule_waits_as_long_as_the_detector(
    name: str, severity: Severity, case: Case, strict: bool | None
) -> None:
    assert detector_wait(name, severity, case, strict) == rule_wait(name, severity)
