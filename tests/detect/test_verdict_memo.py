"""The memoised verdicts (detect/families.py) change nothing: a detector judging every snapshot
from scratch (``memo=False``) gives exactly the same alerts at every step of a long mixed stream."""

from __future__ import annotations

import dataclasses
import random

import pytest
from tests.detect.streams import WORKER, RankStream, coarse, exact

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.findings import Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import IncidentKind, Phase, Pool, Role
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from rigs.fakes.clock import FakeClock

CONFIG = DetectorConfig(deficit_samples=2, resolve_samples=2, resolve_hold=3.0, trend_window=60.0)


def _snapshot(stream: RankStream, rng: random.Random, leak: int) -> Snapshot:  # noqa: PLR0911 (a table)
    """One snapshot of a random kind: healthy, leaking, a surplus, coarse, a tripwire, a repair, ..."""
    kind = rng.choice(
        ["healthy"] * 6 + ["leak", "surplus", "coarse", "idle", "trip", "repair", "probe", "log"]
    )
    if kind == "leak":
        return stream.next(exact(Pool.FULL, 0), gap=leak)
    if kind == "surplus":
        return stream.next(exact(Pool.FULL, -2), exact(Pool.MAMBA, 0))
    if kind == "coarse":
        return stream.next(coarse(Pool.FULL, rng.choice([100, -3])), coarse(Pool.MAMBA, 40))
    if kind == "idle":
        return stream.next(coarse(Pool.FULL, rng.choice([0, 4])), coarse(Pool.MAMBA, 0), phase=Phase.IDLE)
    if kind == "trip":
        wire = Tripwire(TripwireKind.FREE_DUPLICATE, Pool.MAMBA, (3, 4), "release", stream.seq)
        return stream.next(tripwires=(wire,))
    if kind == "repair":
        snap = stream.next()
        fix = Repair(RepairKind.RETURN, Pool.FULL, 2, (7, 8), "idle", stream.seq)
        return dataclasses.replace(snap, repairs=(fix,))
    if kind == "log":
        line = Incident(rng.choice(list(IncidentKind)), "boom", stream.clock.now)
        return stream.next(incidents=(line,))
    health = ProbeHealth(errors_total=rng.randint(0, 3), disabled=rng.random() < 0.3)
    return dataclasses.replace(stream.next(), probe=health if kind == "probe" else stream.probe)


def _stream(steps: int, seed: int) -> list[Snapshot]:
    rng = random.Random(seed)
    clock = FakeClock()
    workers = [dataclasses.replace(WORKER, tp_rank=r) for r in range(3)]
    streams = [RankStream(clock, worker=w, step=0.5, probe=ProbeHealth()) for w in workers]
    leaks = [0, 0, 0]
    out = []
    for _ in range(steps):
        r = rng.randrange(3)
        stream = streams[r]
        if rng.random() < 0.02:
            stream.restart()
        if rng.random() < 0.01:  # the same rank key, another role: its labels change
            stream.worker = dataclasses.replace(stream.worker, role=rng.choice(list(Role)))
        leaks[r] += rng.random() < 0.4
        snap = _snapshot(stream, rng, leaks[r])
        if rng.random() < 0.3:  # a second source of the rank, without the probe's health
            snap = dataclasses.replace(snap, source="sglang-metrics", probe=None)
        out.append(snap)
    return out


@pytest.mark.parametrize(
    ("seeds", "length"),
    [pytest.param(1, 400, id="short"), pytest.param(4, 1500, id="long", marks=pytest.mark.slow)],
)
def test_a_memoised_detector_gives_the_same_alerts_as_one_judging_every_snapshot_from_scratch(
    seeds: int, length: int
) -> None:
    for seed in range(seeds):
        snaps = _stream(length, seed)
        clock = FakeClock(snaps[0].taken_at)
        fast, reference = Detector(CONFIG, clock), Detector(CONFIG, clock, memo=False)
        latest: dict[str, Snapshot] = {}
        for snap in snaps:
            clock.now = snap.taken_at
            latest[f"{snap.worker.key}@{snap.source}"] = snap
            fast.observe(snap)
            reference.observe(snap)
            both = [d.evaluate(latest=list(latest.values())) for d in (fast, reference)]
            assert both[0] == both[1], (seed, snap.seq)
            assert fast.fired() == reference.fired()
        assert fast.trends() == reference.trends()
        assert fast.fired() > 0  # the stream did page: the comparison covers firing alerts


def test_the_stream_covers_every_kind_of_alert_a_snapshot_raises() -> None:
    clock = FakeClock()
    detector = Detector(CONFIG, clock, memo=False)
    names: set[str] = set()
    for snap in _stream(1500, 0):
        clock.now = snap.taken_at
        detector.observe(snap)
        names |= {a.name for a in detector.evaluate()}
    assert {"PoolwatchSlotLeak", "PoolwatchDoubleFree", "PoolwatchProbeRepaired"} <= names
    assert {"PoolwatchProbeDegraded", "PoolwatchSchedulerCrashed"} <= names
