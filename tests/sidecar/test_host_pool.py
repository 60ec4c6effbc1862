"""The HiCache ``host`` pool on the sidecar: it survives the snapshot codec, is exported like
every pool (with no gap when the probe could not know it), and raises PoolwatchHostPoolGap only."""

from __future__ import annotations

from dataclasses import replace

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.detect.alert import AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, WorkerId
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.app import build_registry
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

WORKER = WorkerId("hicache-0", engine="sglang")
HOST = {
    "worker": "hicache-0",
    "role": "unified",
    "dp_rank": "0",
    "tp_rank": "0",
    "pp_rank": "0",
    "pool": "host",
}


def host(available: int, evictable: int, protected: int = 0, held: int | None = 0) -> PoolAccount:
    return PoolAccount(Pool.HOST, 64, available, evictable, protected, held, 0, exactness=Exactness.EXACT)


def snapshot(clock: FakeClock, account: PoolAccount, seq: int = 1) -> Snapshot:
    full = PoolAccount(Pool.FULL, 32, 32, 0, 0, 0, 0, exactness=Exactness.EXACT)
    return Snapshot(WORKER, seq, clock.now, Phase.BUSY, {Pool.FULL: full, Pool.HOST: account}, "probe")


def test_the_host_pool_survives_the_snapshot_codec() -> None:
    snap = snapshot(FakeClock(), host(30, 26, 8))
    assert parse_snapshot(dump_snapshot(snap)).pools[Pool.HOST] == snap.pools[Pool.HOST]


def test_the_host_pool_is_exported_by_state_with_its_gap(clock: FakeClock) -> None:
    store = SnapshotStore()
    store.put(snapshot(clock, host(30, 29, 8)))  # 3 host slots counted twice
    registry = build_registry(store, clock, 10.0)
    assert registry.get_sample_value("poolwatch_pool_capacity_slots", HOST) == 64
    assert registry.get_sample_value("poolwatch_pool_slots", {**HOST, "state": "protected"}) == 8
    assert registry.get_sample_value("poolwatch_pool_slots", {**HOST, "state": "held"}) == 0
    assert registry.get_sample_value("poolwatch_pool_conservation_gap_slots", HOST) == -3


def test_a_host_pool_with_a_storage_backend_exports_no_gap(clock: FakeClock) -> None:
    unknown = replace(host(30, 0), evictable=None, protected=None, held=None)
    store = SnapshotStore()
    store.put(snapshot(clock, unknown))
    registry = build_registry(store, clock, 10.0)
    assert registry.get_sample_value("poolwatch_pool_slots", {**HOST, "state": "available"}) == 30
    assert registry.get_sample_value("poolwatch_pool_conservation_gap_slots", HOST) is None


def test_a_host_double_free_fires_the_host_alert_critical_and_no_device_alert() -> None:
    clock = FakeClock()
    detector = Detector(DetectorConfig(), clock)
    detector.observe(snapshot(clock, host(30, 29, 8)))
    firing = [a for a in detector.evaluate() if a.state is AlertState.FIRING]
    assert [(a.name, a.severity.value, dict(a.labels)["pool"]) for a in firing] == [
        ("PoolwatchHostPoolGap", "critical", "host")
    ]
    assert "counts 3 slots twice" in firing[0].annotations["description"]
    assert "will not crash" in firing[0].annotations["description"]


def test_a_host_leak_waits_the_hold_and_is_a_warning() -> None:
    clock = FakeClock()
    cfg = DetectorConfig()
    detector = Detector(cfg, clock)
    states = []
    for seq in range(1, int(cfg.coarse_hold) + 3):
        detector.observe(snapshot(clock, host(30, 23, 8), seq))  # 3 host slots lost
        states.append({(a.name, a.severity.value, a.state) for a in detector.evaluate()})
        clock.advance(1.0)
    assert ("PoolwatchHostPoolGap", "warning", AlertState.PENDING) in states[0]
    assert ("PoolwatchHostPoolGap", "warning", AlertState.FIRING) in states[-1]
    assert not any(name == "PoolwatchSlotLeak" for s in states for name, _, _ in s)
